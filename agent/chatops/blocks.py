"""Block Kit building blocks and Slack's limits, shared by every message zonemedic renders.

Who calls it: `agent.chatops.render` (incident posts and thread updates), `agent.chatops.replies`
(digest and slash-command replies), the Bolt handlers (`agent.chatops.slack`, for the button action
ids) and the demo. Pure: text in, blocks out.

Limits (Slack's): a message has at most 50 blocks (`cap_blocks` cuts the middle and says how
much); a section's text at most 3,000 characters, a header 150, a context element 2,000, a button's
text 75 and its value 2,000; the plain-text fallback at most 3,000 characters. Outside text is
escaped for mrkdwn (`mrkdwn_escape`: `&`, `<`, `>`, and every control character written as its
escape), so no field can add a line, a link or a mention of its own.

What it does not do: decide what a message says, send it, or read the store.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from agent.model.incident import IncidentSummary
from agent.model.lifecycle import IncidentStatus
from agent.parsing.printable import printable, printable_lines

MAX_BLOCKS = 50
MAX_SECTION = 3000
MAX_HEADER = 150
MAX_BUTTON_TEXT = 75
MAX_BUTTON_VALUE = 2000
MAX_FALLBACK = 3000
MAX_CONTEXT = 2000  # a context element's text


class ButtonAction(StrEnum):
    """The action ids of the decision buttons (the only part of a click trusted besides the user)."""

    APPROVE = "zonemedic_approve"
    REJECT = "zonemedic_reject"
    SNOOZE = "zonemedic_snooze"


@dataclass(frozen=True)
class Rendered:
    """One Slack message: the fallback `text` and its `blocks`."""

    text: str
    blocks: list[dict[str, Any]] = field(default_factory=list)



def clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, ending in `…` when cut."""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - 1)] + "…"


def mrkdwn_escape(text: str) -> str:
    """Escape the three characters Slack's mrkdwn treats as control characters, and write every
    control character as its escape (`agent.parsing.printable`): a newline in a display name or
    a comment cannot start a line of its own ("✅ Approved by ..." forged under the real one)."""
    return printable(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": clip(text, MAX_SECTION)}}


def header(text: str) -> dict[str, Any]:
    return {"type": "header", "text": {"type": "plain_text",
                                       "text": clip(printable(text), MAX_HEADER), "emoji": True}}


def context(text: str) -> dict[str, Any]:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": clip(text, MAX_CONTEXT)}]}


def button(
    text: str, *, action: ButtonAction, value: str, style: str | None = None
) -> dict[str, Any]:
    if len(value) > MAX_BUTTON_VALUE:
        raise ValueError(f"a button value has at most {MAX_BUTTON_VALUE} characters")
    out: dict[str, Any] = {
        "type": "button",
        "text": {"type": "plain_text", "text": clip(printable(text), MAX_BUTTON_TEXT)},
        "action_id": action.value,
        "value": value,
    }
    if style is not None:
        out["style"] = style
    return out


def cap_blocks(blocks: Sequence[dict[str, Any]], *, keep_last: int = 0) -> list[dict[str, Any]]:
    """At most `MAX_BLOCKS` blocks: the middle is replaced by one context line saying how many
    were left out; the first block and the last `keep_last` (e.g. the buttons) always stay."""
    if len(blocks) <= MAX_BLOCKS:
        return list(blocks)
    tail = list(blocks[len(blocks) - keep_last:]) if keep_last else []
    room = MAX_BLOCKS - len(tail) - 1
    head = list(blocks[:room])
    left_out = len(blocks) - len(tail) - len(head)
    return [*head, context(f"… {left_out} more block(s) left out (Slack shows at most "
                           f"{MAX_BLOCKS})"), *tail]


def fallback(text: str) -> str:
    """The plain-text fallback (notifications, screen readers): one printable line."""
    return clip(printable(text), MAX_FALLBACK)


STATUS_WORDS: dict[IncidentStatus, str] = {
    IncidentStatus.OPEN: "open",
    IncidentStatus.AWAITING_APPROVAL: "awaiting approval",
    IncidentStatus.SNOOZED: "snoozed",
    IncidentStatus.APPROVED: "approved",
    IncidentStatus.REMEDIATING: "remediating",
    IncidentStatus.VERIFYING: "verifying",
    IncidentStatus.RESOLVED: "resolved",
    IncidentStatus.REJECTED: "rejected",
    IncidentStatus.EXPIRED: "expired",
    IncidentStatus.FAILED: "failed",
    IncidentStatus.ROLLED_BACK: "rolled back",
    IncidentStatus.SUPERSEDED: "superseded",
    IncidentStatus.REFUSED: "refused: not fixable automatically",
}


def job_label(incident: IncidentSummary) -> str:
    return f"{incident.kind} {incident.namespace}/{incident.name}"


def when(at: datetime) -> str:
    return f"{at.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


def fit_lines(title: str, lines: Iterable[str]) -> str:
    """`title` and as many whole lines as fit in one section, then how many were left out."""
    out = [title]
    size = len(title)
    lines = list(lines)
    for i, line in enumerate(lines):
        remaining = len(lines) - i
        note = f"_… {remaining} more line(s) left out_"
        if size + 1 + len(line) + 1 + len(note) > MAX_SECTION:
            out.append(note)
            break
        out.append(line)
        size += 1 + len(line)
    return "\n".join(out)


def diff_block(diff: str, *, incident_id: int, title: str = "*Patch:*", noun: str = "diff") -> str:
    """The patch diff in a code block, cut at a line end to fit one section; a cut diff says
    how many lines were left out and where to read it whole."""
    fence = "```"
    body = printable_lines(diff).replace(fence, "'''")
    total = body.count("\n") + 1
    room = MAX_SECTION - len(f"{title}\n") - 2 * len(fence) - 2
    if len(body) > room:
        more = (f"\n_… truncated: {total} lines in all; `zonemedic incidents show "
                f"{incident_id}` prints the whole {noun}_")  # fmt: skip
        body = body[: room - len(more)]
        body = body[: body.rfind("\n")] if "\n" in body else body
        return f"{title}\n{fence}{body}{fence}{more}"
    return f"{title}\n{fence}{body}{fence}"
