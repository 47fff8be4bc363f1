"""Incidents as plain data: what the store takes (`FindingRecord`, with the pipeline's typed
`agent.model.document.IncidentDocument`) and returns (summaries, details,
timeline events, decisions, actions, outbox messages and claims, listings, stats).

Who uses it: the store persists and returns these shapes; the agent, the CLI, the chat layer and the
HTTP API read them. The lifecycle rules these records move through live in `agent.model.lifecycle`.
What it does not do: I/O, clock reads or lifecycle decisions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from agent.model.document import IncidentDocument
from agent.model.job import JobRef
from agent.model.lifecycle import (
    DecisionOutcome,
    DecisionSource,
    EventKind,
    IncidentStatus,
    LifecycleError,
    MessageKind,
    MessageStatus,
    RemediationActionKind,
    Severity,
    default_severity,
    fingerprint,
)
from agent.model.stored import StoredDiagnosis
from agent.model.verdict import Verdict
from agent.parsing.numbers import parse_int

# Incident ids are 32-bit integers in the store (PostgreSQL INTEGER): a larger id from a client is
# refused where it is parsed (naming the field), never sent to the database to overflow there.
MAX_INCIDENT_ID = 2**31 - 1


def parse_incident_id(raw: object, *, field: str = "incident id") -> int:
    """An incident id from user input: ASCII digits, 1 to `MAX_INCIDENT_ID`; `InputError` naming
    `field` otherwise."""
    return parse_int(raw, field=field, minimum=1, maximum=MAX_INCIDENT_ID)


def reading_since(samples: Sequence[tuple[float, float]], since: datetime) -> float | None:
    """The latest utilization sample (unix seconds, percent) taken at or after `since`; None when
    there is none yet. A problem's utilization is read over the time the job had it: a sample
    from before (the job healthy, or fixed by an earlier incident) never stands for it."""
    start = since.timestamp()
    found = [value for at, value in samples if at >= start]
    return found[-1] if found else None


@dataclass(frozen=True)
class FindingRecord:
    """What the store records for one finding (from `diagnose`, a metric drop or an alert)."""

    cluster: str
    kind: str
    namespace: str
    name: str
    uid: str | None
    verdict: Verdict
    detected_at: datetime
    diagnosis: Mapping[str, Any] = field(default_factory=dict)
    severity: Severity | None = None
    target_zone: str | None = None
    utilization_now: float | None = None
    utilization_baseline: float | None = None
    estimated_cost: float | None = None
    gpus: int | None = None
    onset_at: datetime | None = None  # when the problem began (e.g. the last pod's binding)
    # the job's utilization samples (unix seconds, percent) behind `utilization_now`: the
    # incident's "utilization before" is read from those taken while it is open (see
    # `reading_since`), never from a time the job may not have had this problem (fixed, healthy)
    utilization_samples: tuple[tuple[float, float], ...] = ()
    # the typed document the pipeline built (`of`): persisted as `diagnosis` in its place
    document: IncidentDocument | None = None
    # when the job object of `uid` was created (None: unknown): a re-detection fills in the uid
    # of an incident recorded without one only for a job created by its first evidence
    job_created_at: datetime | None = None

    def persisted_diagnosis(self) -> dict[str, Any]:
        """The incident's `diagnosis` column: the document's JSON, else the mapping given."""
        return self.document.to_dict() if self.document is not None else dict(self.diagnosis)

    def utilization_while_open(self, opened_at: datetime) -> float | None:
        """The utilization "before" this finding says for an incident opened at `opened_at`:
        the latest sample taken since then; without samples, `utilization_now` as given."""
        if not self.utilization_samples:
            return self.utilization_now
        return reading_since(self.utilization_samples, opened_at)

    @property
    def fingerprint(self) -> str:
        return fingerprint(
            cluster=self.cluster,
            kind=self.kind,
            namespace=self.namespace,
            name=self.name,
            uid=self.uid,
            verdict=self.verdict,
        )

    @property
    def effective_severity(self) -> Severity:
        return self.severity or default_severity(self.verdict)

    @classmethod
    def of(
        cls,
        document: IncidentDocument,
        *,
        cluster: str,
        detected_at: datetime,
        gpus: int | None = None,
        utilization_samples: Sequence[tuple[float, float]] = (),
        job_created_at: datetime | None = None,
    ) -> FindingRecord:
        """The record of the pipeline's typed document (read as it is: nothing parsed back);
        `job_created_at`: when the job object of the document's uid was created."""
        job = document.job
        return cls(
            cluster=cluster,
            kind=job.kind.value,
            namespace=job.namespace,
            name=job.name,
            uid=document.uid or None,
            verdict=document.verdict,
            detected_at=detected_at,
            target_zone=document.target_zone,
            utilization_now=document.metrics.utilization_now,
            utilization_baseline=document.metrics.utilization_baseline,
            estimated_cost=document.estimated_cost,
            gpus=gpus,
            utilization_samples=tuple(utilization_samples),
            document=document,
            job_created_at=job_created_at,
        )

    @classmethod
    def from_finding(
        cls,
        finding: Mapping[str, Any],
        *,
        cluster: str,
        detected_at: datetime,
        utilization_now: float | None = None,
        utilization_baseline: float | None = None,
        estimated_cost: float | None = None,
        gpus: int | None = None,
        onset_at: datetime | None = None,
        utilization_samples: Sequence[tuple[float, float]] = (),
    ) -> FindingRecord:
        """Build a record from a finding dict of `zonemedic diagnose --output json` (the agent
        records its typed documents with `of`)."""
        job = finding.get("job")
        if not isinstance(job, Mapping):
            raise LifecycleError("finding has no 'job' mapping")
        try:
            verdict = Verdict(str(finding.get("verdict")))
        except ValueError:
            raise LifecycleError(f"finding has an unknown verdict {finding.get('verdict')!r}") from None
        uid = job.get("uid")
        target = finding.get("target_zone")
        return cls(
            cluster=cluster,
            kind=str(job.get("kind", "")),
            namespace=str(job.get("namespace", "")),
            name=str(job.get("name", "")),
            uid=str(uid) if uid else None,
            verdict=verdict,
            detected_at=detected_at,
            diagnosis=dict(finding),
            target_zone=str(target) if target else None,
            utilization_now=utilization_now,
            utilization_baseline=utilization_baseline,
            estimated_cost=estimated_cost,
            gpus=gpus,
            onset_at=onset_at,
            utilization_samples=tuple(utilization_samples),
        )


@dataclass(frozen=True)
class Actor:
    """Who did something: a Slack user (id and name), a CLI user, the API, or the agent itself."""

    id: str
    name: str | None = None
    source: DecisionSource = DecisionSource.AUTO

    @property
    def label(self) -> str:
        return self.name or self.id


@dataclass(frozen=True)
class IncidentSummary:
    """One incident without its timeline: what listings return."""

    id: int
    cluster: str
    kind: str
    namespace: str
    name: str
    uid: str | None
    verdict: Verdict
    status: IncidentStatus
    severity: Severity
    fingerprint: str
    target_zone: str | None
    opened_at: datetime
    updated_at: datetime
    closed_at: datetime | None
    status_by: str | None
    utilization_before: float | None
    utilization_after: float | None
    estimated_cost: float | None
    gpus: int | None
    detections: int
    # When an unanswered approval request expires (set by the store's request_approval).
    approval_deadline: datetime | None = None
    # The field manager that undid this incident's fix, or the fix this incident re-detects
    # (its latest `fix_reverted` event's actor); read only where asked (`IncidentQuery.with_reverts`,
    # one incident's detail), else None.
    reverted_by: str | None = None

    @property
    def job_ref(self) -> JobRef | None:
        """The incident's job; None when its recorded kind is none zonemedic knows."""
        return JobRef.parse(self.kind, self.namespace, self.name)


@dataclass(frozen=True)
class TimelineEvent:
    id: int
    incident_id: int
    at: datetime
    kind: EventKind
    actor: str | None
    detail: Mapping[str, Any]


@dataclass(frozen=True)
class Decision:
    """A recorded decision. Kept after its incident is purged (the audit trail)."""

    id: int
    incident_id: int
    outcome: DecisionOutcome
    actor_id: str
    actor_name: str | None
    source: DecisionSource
    decided_at: datetime
    comment: str | None
    job: str  # namespace/name, kept for the audit trail


@dataclass(frozen=True)
class RemediationAction:
    id: int
    incident_id: int
    kind: RemediationActionKind
    at: datetime
    actor: str | None
    succeeded: bool | None
    payload: Mapping[str, Any]
    message: str | None


@dataclass(frozen=True)
class OutboxMessage:
    id: int
    incident_id: int | None
    kind: MessageKind
    channel: str | None
    payload: Mapping[str, Any]
    dedupe_key: str | None
    status: MessageStatus
    attempts: int
    next_attempt_at: datetime
    created_at: datetime
    delivered_at: datetime | None
    last_error: str | None
    external_ref: str | None


@dataclass(frozen=True)
class ClaimedMessage:
    """A message one deliverer holds until `claimed_until`. Only the holder of `token` can mark
    it delivered or failed, and only while it is pending: an expired claim taken over by another
    deliverer can never post twice or revive a dead message."""

    message: OutboxMessage
    token: str
    claimed_until: datetime


@dataclass(frozen=True)
class IncidentDetail:
    """An incident with everything recorded about it."""

    incident: IncidentSummary
    diagnosis: Mapping[str, Any]
    onset_at: datetime | None
    decided_at: datetime | None
    snoozed_until: datetime | None
    events: list[TimelineEvent]
    decisions: list[Decision]
    actions: list[RemediationAction]
    messages: list[OutboxMessage]

    @property
    def stored(self) -> StoredDiagnosis:
        """`diagnosis` read as its typed view (`agent.model.stored`): what the Slack message,
        `incidents show` and the remediation read of it; `StoredDocumentError` when malformed."""
        return StoredDiagnosis.from_stored(self.diagnosis)


@dataclass(frozen=True)
class FindingOutcome:
    """What `record_finding` did: opened a new incident, or re-detected an open one.
    `previous_verdict`: the re-detected incident's verdict before this finding (None when new);
    `incident.verdict` is its verdict after it."""

    incident: IncidentSummary
    new: bool
    previous_verdict: Verdict | None = None

    @property
    def verdict_changed(self) -> bool:
        """A re-detection that changed the incident's verdict."""
        return self.previous_verdict is not None and self.previous_verdict is not self.incident.verdict


@dataclass(frozen=True)
class MessageDraft:
    """A message to queue with a newly opened incident (an outbox row before it has an id)."""

    kind: MessageKind
    payload: Mapping[str, Any]
    channel: str | None = None
    dedupe_key: str | None = None


@dataclass(frozen=True)
class ActionDraft:
    """A remediation step to record with a newly opened incident (a plan preview)."""

    kind: RemediationActionKind
    payload: Mapping[str, Any]
    actor: str | None = None
    succeeded: bool | None = None
    message: str | None = None
    event: EventKind | None = None


@dataclass(frozen=True)
class EventDraft:
    """A timeline event to add to a newly opened incident (a note)."""

    kind: EventKind
    detail: Mapping[str, Any]
    actor: str | None = None


@dataclass(frozen=True)
class FollowUp:
    """What is written with a newly opened incident, in the transaction that opens it, in this
    order: its plan preview (`action`), its approval request (`open -> awaiting_approval` with
    `approval_deadline`, by `approval_actor`), its outbox messages, then its notes. `now` is the
    time of these writes."""

    now: datetime
    action: ActionDraft | None = None
    approval_deadline: datetime | None = None
    approval_actor: str = "zonemedic"
    messages: tuple[MessageDraft, ...] = ()
    notes: tuple[EventDraft, ...] = ()


@dataclass(frozen=True)
class TransitionResult:
    """The result of a conditional transition or decision.

    `applied` is True for the one winner. A loser gets `applied=False` with the incident's current
    `status`, who put it there (`status_by`) and, when the winner was a decision, that `decision`.
    """

    incident_id: int
    applied: bool
    status: IncidentStatus
    status_by: str | None
    previous: IncidentStatus | None = None
    decision: Decision | None = None


@dataclass(frozen=True)
class RecordProblem:
    """A stored row the code cannot read (unknown status, corrupt JSON): named, never fatal."""

    incident_id: int
    problem: str

    def __str__(self) -> str:
        return f"incident {self.incident_id}: {self.problem}"


@dataclass(frozen=True)
class IncidentListing:
    incidents: list[IncidentSummary]
    problems: list[RecordProblem] = field(default_factory=list)


@dataclass(frozen=True)
class IncidentQuery:
    """Filters of `list_incidents` (all optional, ANDed)."""

    cluster: str | None = None
    namespace: str | None = None
    name: str | None = None
    uid: str | None = None
    status: IncidentStatus | None = None
    verdict: Verdict | None = None
    since: datetime | None = None
    open_only: bool = False
    limit: int = 50
    with_reverts: bool = False  # fill `reverted_by` (one more query over the listed incidents)


@dataclass(frozen=True)
class EgressTotals:
    """Cross-zone egress of split incidents, apart by basis: measured (by the cluster's exporter)
    and estimated (from diagnosis.steps_per_day). Dollars and GB, and how many incidents."""

    measured_usd: float = 0.0
    measured_gb: float = 0.0
    measured_incidents: int = 0
    estimated_usd: float = 0.0
    estimated_gb: float = 0.0
    estimated_incidents: int = 0


@dataclass(frozen=True)
class IncidentStats:
    """`incidents stats`: counts and mean durations over incidents opened since `since`.

    `egress_per_day_open`: the cross-zone egress per day of those still open (while split);
    `egress_saved`: of those resolved, what the egress rate recorded before the fix comes to over
    the time since the fix (see `agent.model.lifecycle.egress_saved`)."""

    since: datetime
    until: datetime
    total: int
    by_verdict: dict[str, int]
    by_outcome: dict[str, int]
    mean_time_to_detect: timedelta | None
    mean_time_to_decide: timedelta | None
    mean_time_to_resolve: timedelta | None
    gpu_hours_recovered: float
    egress_per_day_open: EgressTotals = field(default_factory=EgressTotals)
    egress_saved: EgressTotals = field(default_factory=EgressTotals)


@dataclass(frozen=True)
class PurgeResult:
    incidents: int
    events: int
    actions: int
    messages: int
