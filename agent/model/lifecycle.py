"""The incident lifecycle as a pure state machine: statuses, transitions, decisions, dedupe.

Who uses it: the store (`agent.store`) persists these shapes and applies `TRANSITIONS`; the agent
(sweeps, detection), the chat layer and the HTTP API read and produce them. Nothing here does I/O or
reads a clock: every time is passed in (`now`), and every function is deterministic.

What it does not do: talk to a database, render text for people, or decide *when* to transition
(that is the agent's job); it only says which transitions exist and what a crashed agent must do to
resume from each state.

Lifecycle
---------
::

    open -> awaiting_approval -> approved -> remediating -> verifying -> resolved
      |            |    |  \\          |            |             |
      |            |    |   snoozed    |            +-> failed    +-> rolled_back / failed
      |            |    +-> rejected / expired      +-> rolled_back
      +-> approved / rejected / snoozed (decided before approval was requested, or auto approval)
      +-> expired (an approval deadline was set and passed)
    snoozed -> awaiting_approval (the snooze ended) / expired
    open / awaiting_approval / snoozed / approved -> superseded (the job changed before remediation)
    remediating -> superseded (the job changed after the plan, before anything was written to it)
    remediating / verifying -> superseded (the job was deleted or recreated: nothing to restore)
    open / awaiting_approval / snoozed / verifying -> resolved (a re-diagnosis finds it healthy)
    approved / remediating -> refused (a guard or the plan refused the approved fix before anything
      was written: protected namespace, Kueue-managed, finished, no room...)
    refused -> resolved (a re-diagnosis finds it healthy) / superseded (the job is gone or was
      recreated, its verdict moved to another class, or the fix can now be applied)

An incident is decidable (approve, reject, snooze) while it is `open` or `awaiting_approval`.

A refused incident (`refused`) stays open: the problem it is about is still there and zonemedic
will not fix it, so it remains the job's one open incident (its message says why and what to do)
and re-detections of the same problem fold into its timeline, never a new incident or post. What
ends it is a re-detection that is another problem (`refused_redetection`): the job recreated
(another uid), a verdict of another class, or a fix that can now be applied (the guard no longer
holds: the Kueue label removed, the namespace no longer protected, room in a zone); it is then
superseded and the finding opens a new incident, as any new problem does.

The terminal states (`resolved`, `rejected`, `expired`, `failed`, `rolled_back`, `superseded`) close
the incident (`closed_at` is set); a later detection of the same problem opens a new incident.

Each transition is applied by the store as ONE conditional UPDATE (`WHERE status = <expected>`) in
the same database transaction as its timeline event (and, for a decision, its decision row), so two
deciders never both win and a decision is never recorded without its state, or the reverse.

Crash-resume rules (`resume_action`)
------------------------------------
A process may die at any point; the database holds the last committed state and the agent, when it
(re)gains leadership, calls `resume_action(status)` for every non-terminal incident:

- `open`: NOTIFY. The finding is recorded but may not be posted yet: make sure a post is in the
  outbox (enqueue is idempotent by its dedupe key).
- `awaiting_approval`: AWAIT_DECISION. Nothing to redo; expire it when its deadline has passed.
- `snoozed`: AWAIT_SNOOZE_END. Move it back to `awaiting_approval` once `snoozed_until` passed.
- `approved`: START_REMEDIATION. The approval is durable (committed with the state): never ask
  again. Transition `approved -> remediating` (one winner among replicas) and run the plan.
- `remediating`: REAPPLY_AND_VERIFY. The process died while applying: re-read the job, re-apply the
  recorded plan (the executor's patches are idempotent merge patches), then verify.
- `verifying`: VERIFY. Run the verification again; it is a pure judgement of fresh observations.
- `refused`: NONE. Nothing was written and nothing is to be done but wait for the problem to end.
- terminal states: NONE.

Dedupe
------
One open incident per (cluster, job): the job's kind, namespace and name (its uid may change, or
be unknown at first, and it is still the same job). A re-detection while it is open folds into its
timeline; a new incident opens only after the last one closed. The verdict class groups verdicts
that are the same problem at different severities: `zone_split_blocked` and `zone_split_degraded`
are one class (`zone_split`); every other incident verdict is its own class. Before a decision an
incident follows what is seen (`follows_verdict`): a verdict of its own class, or any topology
verdict (`TOPOLOGY_CLASSES`: where the pods are and what the policies allow), replaces its verdict;
a symptom (a utilization drop, an alert) seen on an incident of another class is a timeline event
only. `pending` and `healthy` are not incidents. The fingerprint hashes only identifiers (cluster,
job uid or kind/namespace/name, verdict class) of what opened the incident: never generated text,
never the diagnosis.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from agent.errors import ZonemedicError
from agent.model.verdict import Verdict


class LifecycleError(ZonemedicError):
    """A request the lifecycle does not allow (a bad transition, a verdict that is no incident)."""


class VerdictClass(StrEnum):
    ZONE_SPLIT = "zone_split"
    POLICY_BLOCKED = "policy_blocked"
    ZONE_LABEL_MISMATCH = "zone_label_mismatch"
    GPU_UTILIZATION_DROP = "gpu_utilization_drop"
    ALERT = "alert"


_VERDICT_CLASS: dict[Verdict, VerdictClass] = {
    Verdict.ZONE_SPLIT_BLOCKED: VerdictClass.ZONE_SPLIT,
    Verdict.ZONE_SPLIT_DEGRADED: VerdictClass.ZONE_SPLIT,
    Verdict.POLICY_BLOCKED: VerdictClass.POLICY_BLOCKED,
    Verdict.ZONE_LABEL_MISMATCH: VerdictClass.ZONE_LABEL_MISMATCH,
    Verdict.GPU_UTILIZATION_DROP: VerdictClass.GPU_UTILIZATION_DROP,
    Verdict.ALERT: VerdictClass.ALERT,
}


# The classes the diagnosis of the pods' placement and the policies gives (not symptoms).
TOPOLOGY_CLASSES: frozenset[VerdictClass] = frozenset(
    {VerdictClass.ZONE_SPLIT, VerdictClass.POLICY_BLOCKED, VerdictClass.ZONE_LABEL_MISMATCH}
)


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


_DEFAULT_SEVERITY: dict[Verdict, Severity] = {
    Verdict.ZONE_SPLIT_BLOCKED: Severity.CRITICAL,
    Verdict.POLICY_BLOCKED: Severity.CRITICAL,
    Verdict.ZONE_LABEL_MISMATCH: Severity.CRITICAL,
    Verdict.ZONE_SPLIT_DEGRADED: Severity.WARNING,
    Verdict.GPU_UTILIZATION_DROP: Severity.WARNING,
    Verdict.ALERT: Severity.WARNING,
}


class IncidentStatus(StrEnum):
    OPEN = "open"
    AWAITING_APPROVAL = "awaiting_approval"
    SNOOZED = "snoozed"
    APPROVED = "approved"
    REMEDIATING = "remediating"
    VERIFYING = "verifying"
    RESOLVED = "resolved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    FAILED = "failed"
    ROLLED_BACK = "rolled_back"
    SUPERSEDED = "superseded"
    REFUSED = "refused"  # the approved fix was refused by a guard or the plan; nothing written


S = IncidentStatus

# The whole lifecycle: status -> the statuses it may move to. Absent or empty: terminal.
TRANSITIONS: dict[IncidentStatus, frozenset[IncidentStatus]] = {
    S.OPEN: frozenset(
        {S.AWAITING_APPROVAL, S.APPROVED, S.REJECTED, S.SNOOZED, S.RESOLVED, S.EXPIRED,
         S.SUPERSEDED}
    ),
    S.AWAITING_APPROVAL: frozenset(
        {S.APPROVED, S.REJECTED, S.SNOOZED, S.EXPIRED, S.RESOLVED, S.SUPERSEDED}
    ),
    S.SNOOZED: frozenset({S.AWAITING_APPROVAL, S.EXPIRED, S.RESOLVED, S.SUPERSEDED}),
    S.APPROVED: frozenset({S.REMEDIATING, S.FAILED, S.SUPERSEDED, S.REFUSED}),
    S.REMEDIATING: frozenset({S.VERIFYING, S.FAILED, S.ROLLED_BACK, S.SUPERSEDED, S.REFUSED}),
    S.REFUSED: frozenset({S.RESOLVED, S.SUPERSEDED}),
    S.VERIFYING: frozenset({S.RESOLVED, S.FAILED, S.ROLLED_BACK, S.SUPERSEDED}),
    S.RESOLVED: frozenset(),
    S.REJECTED: frozenset(),
    S.EXPIRED: frozenset(),
    S.FAILED: frozenset(),
    S.ROLLED_BACK: frozenset(),
    S.SUPERSEDED: frozenset(),
}

TERMINAL: frozenset[IncidentStatus] = frozenset(s for s, nxt in TRANSITIONS.items() if not nxt)
OPEN_STATUSES: frozenset[IncidentStatus] = frozenset(IncidentStatus) - TERMINAL


class DecisionOutcome(StrEnum):
    APPROVE = "approve"
    REJECT = "reject"
    SNOOZE = "snooze"


DECISION_STATUS: dict[DecisionOutcome, IncidentStatus] = {
    DecisionOutcome.APPROVE: S.APPROVED,
    DecisionOutcome.REJECT: S.REJECTED,
    DecisionOutcome.SNOOZE: S.SNOOZED,
}

# Where a decision may be taken: every outcome is a transition from each of these.
DECIDABLE: frozenset[IncidentStatus] = frozenset({S.OPEN, S.AWAITING_APPROVAL})


class DecisionSource(StrEnum):
    SLACK = "slack"
    CLI = "cli"
    API = "api"
    AUTO = "auto"


class EventKind(StrEnum):
    DETECTED = "detected"
    REDETECTED = "redetected"
    POSTED = "posted"
    AWAITING_APPROVAL = "awaiting_approval"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    SNOOZED = "snoozed"
    REMEDIATION_STARTED = "remediation_started"
    REMEDIATION_STEP = "remediation_step"
    PLAN_PREVIEWED = "plan_previewed"  # the fix's plan (or why none) computed before approval
    VERIFYING = "verifying"
    VERIFIED = "verified"
    ROLLED_BACK = "rolled_back"
    # a fix zonemedic applied was undone: on the fixed incident and on its re-detection's
    # (`agent.model.revert.revert_event`), the actor the field manager that undid it
    FIX_REVERTED = "fix_reverted"
    FAILED = "failed"
    RESOLVED = "resolved"
    SUPERSEDED = "superseded"
    REFUSED = "refused"
    EVIDENCE = "evidence"
    NOTE = "note"


_STATUS_EVENT: dict[IncidentStatus, EventKind] = {
    S.OPEN: EventKind.DETECTED,
    S.AWAITING_APPROVAL: EventKind.AWAITING_APPROVAL,
    S.SNOOZED: EventKind.SNOOZED,
    S.APPROVED: EventKind.APPROVED,
    S.REMEDIATING: EventKind.REMEDIATION_STARTED,
    S.VERIFYING: EventKind.VERIFYING,
    S.RESOLVED: EventKind.RESOLVED,
    S.REJECTED: EventKind.REJECTED,
    S.EXPIRED: EventKind.EXPIRED,
    S.FAILED: EventKind.FAILED,
    S.ROLLED_BACK: EventKind.ROLLED_BACK,
    S.SUPERSEDED: EventKind.SUPERSEDED,
    S.REFUSED: EventKind.REFUSED,
}


class RemediationActionKind(StrEnum):
    PLAN = "plan"
    DRY_RUN = "dry_run"
    APPLY = "apply"
    VERIFY = "verify"
    ROLLBACK = "rollback"


class ResumeAction(StrEnum):
    NONE = "none"
    NOTIFY = "notify"
    AWAIT_DECISION = "await_decision"
    AWAIT_SNOOZE_END = "await_snooze_end"
    START_REMEDIATION = "start_remediation"
    REAPPLY_AND_VERIFY = "reapply_and_verify"
    VERIFY = "verify"


_RESUME: dict[IncidentStatus, ResumeAction] = {
    S.OPEN: ResumeAction.NOTIFY,
    S.AWAITING_APPROVAL: ResumeAction.AWAIT_DECISION,
    S.SNOOZED: ResumeAction.AWAIT_SNOOZE_END,
    S.APPROVED: ResumeAction.START_REMEDIATION,
    S.REMEDIATING: ResumeAction.REAPPLY_AND_VERIFY,
    S.VERIFYING: ResumeAction.VERIFY,
}


class MessageKind(StrEnum):
    POST = "post"
    UPDATE = "update"
    DIGEST = "digest"


class MessageStatus(StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    DEAD = "dead"


# --------------------------------------------------------------------------------------------
# Pure functions of the lifecycle


def verdict_class(verdict: Verdict) -> VerdictClass:
    """The dedupe class of an incident verdict; `pending`/`healthy` are not incidents."""
    try:
        return _VERDICT_CLASS[verdict]
    except KeyError:
        raise LifecycleError(f"verdict {verdict.value!r} does not open an incident") from None


def follows_verdict(current: Verdict, seen: Verdict) -> bool:
    """Whether an undecided open incident of verdict `current`, re-detected as `seen`, takes
    `seen` as its verdict: a verdict of the same class always (a degraded split that starts being
    blocked is the same split, now blocked), a topology verdict always (the job's placement and
    policies explain more than a symptom, and the job's problem is what they now say); a symptom
    (a utilization drop, an alert) never replaces a verdict of another class."""
    seen_class = verdict_class(seen)
    try:
        current_class = verdict_class(current)
    except LifecycleError:
        return True
    return seen_class is current_class or seen_class in TOPOLOGY_CLASSES


class Redetected(StrEnum):
    """What a re-detection does to the job's refused incident."""

    FOLD = "fold"  # the same problem, still not fixable: a timeline event on the refused incident
    REOPEN = "reopen"  # another problem: the refused incident is superseded, the finding opens one


def refused_redetection(
    *, current: Verdict, seen: Verdict, same_job: bool, fixable: bool
) -> tuple[Redetected, str]:
    """What a re-detection seen as `seen` does to the job's refused incident of verdict `current`,
    and why: REOPEN when it is another problem -- the job was recreated (`same_job` False: another
    uid), the verdict is of another class, or the fix can now be applied (`fixable`: the finding
    has a fix and no guard refuses it any more); else FOLD (the refused, unchanged problem)."""
    if not same_job:
        return Redetected.REOPEN, "the job was recreated since the fix was refused"
    if verdict_class(seen) is not verdict_class(current):
        return Redetected.REOPEN, (f"the job is now {seen.value}, another problem than the "
                                   f"refused {current.value}")
    if fixable:
        return Redetected.REOPEN, "the fix can be applied now: what refused it no longer holds"
    return Redetected.FOLD, "the refused problem, unchanged"


def default_severity(verdict: Verdict) -> Severity:
    """The severity of a verdict when the caller has no better one."""
    return _DEFAULT_SEVERITY.get(verdict, Severity.INFO)


def can_transition(current: IncidentStatus, new: IncidentStatus) -> bool:
    return new in TRANSITIONS[current]


def check_transition(current: IncidentStatus, new: IncidentStatus) -> None:
    """Raise `LifecycleError` unless `current -> new` is in the transitions table."""
    if not can_transition(current, new):
        allowed = ", ".join(sorted(TRANSITIONS[current])) or "nothing (terminal)"
        raise LifecycleError(
            f"transition {current.value} -> {new.value} is not allowed "
            f"(from {current.value}: {allowed})"
        )


def is_terminal(status: IncidentStatus) -> bool:
    return status in TERMINAL


def event_for_status(status: IncidentStatus) -> EventKind:
    """The timeline event recorded when an incident enters `status`."""
    return _STATUS_EVENT[status]


def resume_action(status: IncidentStatus) -> ResumeAction:
    """What an agent restarting (or taking over leadership) must do for an incident in `status`."""
    return _RESUME.get(status, ResumeAction.NONE)


def job_key(*, kind: str, namespace: str, name: str, uid: str | None) -> str:
    """The job identity used in fingerprints: its uid, else kind/namespace/name."""
    return f"uid:{uid}" if uid else f"name:{kind}/{namespace}/{name}"


def fingerprint(
    *, cluster: str, kind: str, namespace: str, name: str, uid: str | None, verdict: Verdict
) -> str:
    """Dedupe key of an incident: a hash of identifiers and the verdict class, nothing generated."""
    parts = (cluster, job_key(kind=kind, namespace=namespace, name=name, uid=uid))
    raw = "\x1f".join((*parts, verdict_class(verdict).value))
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:40]


def retry_delay(attempts: int, *, base: timedelta, cap: timedelta) -> timedelta:
    """Exponential backoff after `attempts` failures: base, 2 base, 4 base, ... at most `cap`."""
    if attempts <= 0:
        return timedelta(0)
    factor: int = 2 ** min(attempts - 1, 30)
    delay: timedelta = base * factor
    return delay if delay < cap else cap


def gpu_hours_recovered(
    *,
    gpus: int | None,
    utilization_before: float | None,
    utilization_after: float | None,
    resolved_at: datetime | None,
    until: datetime,
) -> float:
    """GPU-hours recovered by one remediation (an estimate).

    `gpus x max(0, after - before) / 100 x hours from resolution to until`: the share of the job's
    GPU capacity that was idle before the fix and busy after it, over the time since the fix
    (bounded by `until`, the end of the stats window). 0 when a figure is unknown.
    """
    if gpus is None or utilization_before is None or utilization_after is None:
        return 0.0
    if resolved_at is None or until <= resolved_at:
        return 0.0
    gain = max(0.0, utilization_after - utilization_before) / 100.0
    return gpus * gain * (until - resolved_at).total_seconds() / 3600.0


def egress_saved(per_day: float | None, *, resolved_at: datetime | None, until: datetime) -> float:
    """What a split job's egress rate recorded before its fix (dollars or GB per day) comes to
    from the fix to `until` (an estimate: the job would have stayed split). 0 when unknown."""
    if per_day is None or resolved_at is None or until <= resolved_at:
        return 0.0
    return max(0.0, per_day) * (until - resolved_at).total_seconds() / 86_400.0


def to_jsonable(value: Any) -> Any:
    """Plain JSON data from these dataclasses (for `--output json` and the HTTP API): datetimes
    as ISO 8601 UTC, durations as seconds, enums as their values, tuples as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    return value
