"""What a new incident needs once a playbook proposes co-location: nothing, a request, or auto.

Who calls it: the agent's approval step (`agent.approval.requests`), when a `propose_colocation`
action of a playbook fires for a newly recorded incident. Pure: the incident's `Remediability`
(read off its typed document) in, an `ApprovalStep` out, `now` passed in.

The rules:
- A finding that is not remediable (no target zone, a protected namespace, a kind zonemedic cannot
  move), or whose plan preview was refused (`proposed_fix.refusal`: no room in the target zone,
  Kueue-managed, ...), needs no decision: NONE (the incident stays `open`; people still see it).
- A namespace the playbook's approval policy lists in `auto_namespaces` is approved at once by
  zonemedic itself (AUTO: the one decision function with the `auto` source), unless it is a
  protected namespace, which is never auto-approved, or the job's last co-location rolled back
  less than `remediation.auto_hold` ago (`rolled_back`: when and why): then a person decides
  (REQUEST, saying why), so a fix that does not work is not retried in a loop. A fix that was
  undone (`Remediability.reverted`, from the preview's `reverted`: a GitOps sync or another writer restored the old fields) holds
  it the same way, from when it was reverted: re-applying it would be undone again.
- Otherwise REQUEST: the incident awaits approval until `now + expiry`, the policy's `expiry` when
  the playbook sets one, else the agent's `slack.approval_ttl`. Past that deadline a decision
  changes nothing and the leader's expiry job moves the incident to `expired`.

What it does not do: record anything, post anything, or check who may approve.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from agent.model.document import IncidentDocument
from agent.playbook.model import ApprovalPolicy


class ApprovalStepKind(StrEnum):
    NONE = "none"
    REQUEST = "request"
    AUTO = "auto"


@dataclass(frozen=True)
class ApprovalStep:
    kind: ApprovalStepKind
    deadline: datetime | None = None  # REQUEST only
    reason: str = ""


@dataclass(frozen=True)
class Remediability:
    """What the approval rule reads of an incident: whether the diagnosis says the job can be
    co-located (`remediable` and a target zone) and why the previewed fix cannot be applied
    (`refusal`: the plan preview's, or None)."""

    remediable: bool
    target_zone: str | None = None
    refusal: str | None = None
    reverted: RolledBack | None = None  # the job's last fix undone (the preview's `reverted`)

    @classmethod
    def of(cls, document: IncidentDocument) -> Remediability:
        """The facts of an incident as the pipeline records it (its finding and plan preview)."""
        finding = document.finding
        fix = document.proposed_fix
        reason = fix.get("refusal") if fix is not None else None
        return cls(
            remediable=finding is not None and finding.remediable,
            target_zone=finding.target_zone if finding is not None else None,
            refusal=str(reason) if reason else None,
            reverted=reverted(fix) if fix is not None else None,
        )

    @property
    def movable(self) -> bool:
        return self.remediable and bool(self.target_zone)


@dataclass(frozen=True)
class RolledBack:
    """A job's co-location that rolled back: when its incident closed, and why."""

    at: datetime
    reason: str


def reverted(fix: Mapping[str, Any]) -> RolledBack | None:
    """The job's last fix undone, as a hold (the preview's `reverted`), or None."""
    found = fix.get("reverted")
    if not isinstance(found, Mapping):
        return None
    try:
        at = datetime.fromisoformat(str(found.get("at") or ""))
    except ValueError:
        return None
    manager = str(found.get("manager") or "an unknown writer")
    return RolledBack(at=at, reason=f"incident {found.get('incident_id')}: fix reverted by "
                                    f"{manager}")  # fmt: skip


def approval_step(
    *,
    namespace: str,
    subject: Remediability,
    policy: ApprovalPolicy,
    protected_namespaces: Collection[str],
    default_ttl: timedelta,
    now: datetime,
    rolled_back: RolledBack | None = None,
    auto_hold: timedelta = timedelta(0),
) -> ApprovalStep:
    """What the incident of `subject` in `namespace` needs (see the module docstring).
    `rolled_back`: the job's most recent co-location that rolled back, if any."""
    if not subject.movable or namespace in protected_namespaces:
        return ApprovalStep(ApprovalStepKind.NONE, reason="the finding is not remediable")
    refused = subject.refusal
    if refused is not None:
        return ApprovalStep(ApprovalStepKind.NONE, reason=f"the fix cannot be applied: {refused}")
    ttl = policy.expiry if policy.expiry is not None else default_ttl
    undone = subject.reverted
    if undone is not None and (rolled_back is None or undone.at > rolled_back.at):
        rolled_back = undone
    if policy.is_auto(namespace):
        if rolled_back is None or now - rolled_back.at >= auto_hold:
            return ApprovalStep(
                ApprovalStepKind.AUTO,
                reason=f"namespace {namespace} opts in to automatic co-location",
            )
        what = ("the last fix of this job was undone" if rolled_back is undone
                else "the last one of this job rolled back")  # fmt: skip
        return ApprovalStep(
            ApprovalStepKind.REQUEST, deadline=now + ttl,
            reason=(f"automatic co-location held: {what} at "
                    f"{rolled_back.at:%Y-%m-%d %H:%M} UTC ({rolled_back.reason}); awaiting "
                    f"approval for {_duration(ttl)}"),
        )  # fmt: skip
    return ApprovalStep(ApprovalStepKind.REQUEST, deadline=now + ttl,
                        reason=f"awaiting approval for {_duration(ttl)}")


def _duration(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
