"""The Slack sections of the policy-side fix a finding offers when co-location is refused.

Who calls it: the incident post (`agent.chatops.render.incident_message`), for a finding whose
stored diagnosis carries a `policy_fix` (`agent.model.stored.StoredPolicyOffer`). It says the
alternative in words (which policy, how many denied flows it admits, that its what-if blast radius
is exactly those flows and nothing else, or what else it touches), the command that applies it,
and that zonemedic does not apply policies itself (network policy belongs to the security team),
then the policy as a diff in a code block (cut to one section like the plan's patch). An offer
with no policy says why none can be built. Pure: stored data in, section texts out; it does not
send anything or decide whether the post shows it.
"""

from __future__ import annotations

from agent.chatops.blocks import diff_block, mrkdwn_escape
from agent.model.stored import StoredPolicyOffer


def policy_offer_texts(offer: StoredPolicyOffer, *, incident_id: int) -> list[str]:
    """The sections' texts: the offer in words, then its diff (none when refused)."""
    if offer.refused is not None:
        return [f"*Policy-side fix:* none can be proposed: {mrkdwn_escape(offer.refused)}"]
    if offer.exact:
        radius = (f"what-if blast radius: exactly the job's {offer.opened} denied required "
                  "flow(s) become allowed; no other flow changes")  # fmt: skip
    else:
        others = ", ".join(offer.touched_outside_job[:5])
        radius = (f"what-if blast radius: NOT limited to the job's flows ({offer.other_flows_changed} "
                  "other flow(s) change" + (f"; it also selects {others}" if others else "")
                  + "): review it before applying")  # fmt: skip
    words = (f"*Alternative: a policy change.* Co-location cannot fix this job; a "
             f"{mrkdwn_escape(offer.kind or 'policy')} admitting only its own traffic can. "
             f"{mrkdwn_escape(radius)}.\n"
             f"*Apply:* `{mrkdwn_escape(offer.apply)}`\n"
             f"_{mrkdwn_escape(offer.note)}._")  # fmt: skip
    diff = diff_block(offer.diff, incident_id=incident_id, title="*Policy to add:*", noun="policy")
    return [words, diff]
