"""The chat message's ownership section: who owns the objects a fix changes, and what it means.

Called by the message renderer (`agent.chatops.render`) with the incident's proposed fix. Pure:
it renders Slack mrkdwn text from `agent.model.proposal.ProposedFix.owners` and sends nothing.
Objects nobody re-applies get no section (the live fix lasts); one a GitOps tool, a pipeline,
kubectl apply or a controller owns is said with what that means, and the section points at the
hand-over patch (`zonemedic incidents patch N`), whose kustomize form is shown as a snippet
(`handover_snippet`). A fix that was undone (`ProposedFix.reverted`)
is named first: by which field manager, when, which fields, and that the change belongs in the
object's source rather than applied live again.
"""

from __future__ import annotations

from agent.chatops.blocks import mrkdwn_escape
from agent.model.handover import PatchFormat, render
from agent.model.proposal import ProposedFix
from agent.parsing.printable import printable_lines

SNIPPET_LIMIT = 2500  # characters of patch in one section (Slack's limit is 3000)


def ownership_text(fix: ProposedFix | None, *, incident_id: int) -> str | None:
    """The section's text, or None when nothing re-applies the objects and no fix was undone."""
    if fix is None or not (fix.owners or fix.reverted):
        return None
    reverted = ""
    if fix.reverted is not None:
        title = fix.reverted.title()
        reverted = (f"*{mrkdwn_escape(title[:1].upper() + title[1:])}* "
                    f"{mrkdwn_escape(fix.reverted.sentence().removeprefix(title).lstrip())}"
                    "\n")  # fmt: skip
    if fix.lasting and fix.reverted is None:
        return None  # nothing re-applies the objects: the live fix lasts, nothing to say
    lines = [f"• {mrkdwn_escape(o.sentence())}" for o in fix.owners if not o.ownership.durable]
    lines.append(f"The change for the source: `zonemedic incidents patch {incident_id} "
                 "--format kustomize` (or `manifest`, `json6902`).")  # fmt: skip
    return reverted + "*Who owns it:*\n" + "\n".join(lines)


def handover_snippet(fix: ProposedFix | None, *, incident_id: int) -> str | None:
    """The kustomize patch of a fix something re-applies (or that was reverted), in a code
    block cut at a line end to fit one section; None when the live fix lasts."""
    if fix is None or not fix.handovers or (fix.lasting and fix.reverted is None):
        return None
    text = printable_lines(render(fix.handovers, PatchFormat.KUSTOMIZE)).replace("```", "'''")
    cut = ""
    if len(text) > SNIPPET_LIMIT:
        text = text[: text.rfind("\n", 0, SNIPPET_LIMIT)]
        cut = (f"\n_(cut: `zonemedic incidents patch {incident_id} --format kustomize` prints "
               "it whole)_")  # fmt: skip
    return f"*Kustomize patch for the source:*\n```{text}```{cut}"
