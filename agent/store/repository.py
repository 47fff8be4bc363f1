"""The incident store's facade: one object over one database, each operation one transaction.

Who calls it: the agent (detection, sweeps, remediation), the chat layer (decisions, outbox) and the
HTTP API and CLI (history queries). Every method takes `now` (no clock reads here) and returns plain
dataclasses from `agent.model.incident`, never ORM rows. Only the store's modules write the incident
tables; this facade runs each of their operations in one transaction:

- findings: `record_finding(record)` -> `FindingOutcome` (`agent.store.findings`);
  `bind_job_uid(id, uid, *, now, actor)`: an incident recorded without its job's uid bound to one;
  `record_findings(records, follow=)`: many at once, each new incident with what `follow` names
  for it (plan preview, approval request, outbox messages, notes) in the transaction that opens
  it, one transaction per `BATCH` findings (`agent.store.batches`)
- lifecycle: `transition(id, expected, new, *, actor, now)` and `record_decision(id, outcome, *,
  actor, now)` -> `TransitionResult`, one conditional UPDATE each (`agent.store.transitions`)
- approval deadlines: `request_approval(id, *, deadline, now, actor)`, `expire_due(*, now)`
  (`agent.store.approval_deadlines`)
- timeline: `add_event`, `record_action` (`agent.store.timeline`)
- outbox: `enqueue_message`, `claim_messages`, `mark_delivered`, `mark_failed` with the claim's
  token (`agent.store.outbox`)
- history: `list_incidents(query)`, `get_incident(id)`, `stats(since=, now=)`, `open_counts`,
  `incidents_to_resume()` (`agent.store.queries`)
- admissions: `record_admission`, `list_admissions`, `admission_summary`, `kept_group_zone`,
  `keep_group_zone` (`agent.store.admissions`)
- `purge(before=)` (`agent.store.retention`), `ping()`, `ready()`, `wait_until_reachable()`

Every call retries transient database failures within `database.write_retry` (see
`agent.store.resilience`) and raises `StoreUnavailableError` when they persist: nothing is dropped
silently. Checks that need no database (an allowed transition, a snooze with its end, column
lengths) run before any I/O.

The class is assembled from its rooms: `agent.store.transactions.StoreTransactions` (the engine, the
retrier, one transaction per operation, `ping`/`ready`), `agent.store.messages.OutboxOperations`
(the outbox) and `agent.store.history.HistoryReads` (the history); findings, lifecycle, approvals,
timeline and retention are written here.

What it does not do: decide when to transition (the agent), render anything, or read a clock.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from agent.model.incident import (
    Actor,
    FindingOutcome,
    FindingRecord,
    FollowUp,
    PurgeResult,
    TransitionResult,
)
from agent.model.lifecycle import (
    DECISION_STATUS,
    DecisionOutcome,
    EventKind,
    IncidentStatus,
    LifecycleError,
    RemediationActionKind,
    check_transition,
)
from agent.settings import DatabaseSettings
from agent.store import approval_deadlines, batches, findings, retention, timeline, transitions
from agent.store.admissions import AdmissionOperations
from agent.store.engine import make_engine
from agent.store.errors import InvalidRecordError
from agent.store.history import HistoryReads
from agent.store.messages import OutboxOperations
from agent.store.outbox import OutboxPolicy
from agent.store.resilience import Readiness, RetryPolicy

__all__ = ["IncidentStore", "OutboxPolicy", "open_store"]

BATCH = 200  # findings per transaction of `record_findings`


class IncidentStore(OutboxOperations, HistoryReads, AdmissionOperations):
    """The repository over one database (see the module docstring for the surface); its
    transactions, outbox operations and history reads live in `transactions`, `messages` and
    `history`."""

    # ----------------------------------------------------------------------------------------
    # findings and lifecycle

    def record_finding(self, record: FindingRecord) -> FindingOutcome:
        """Open an incident for the finding, or add a re-detection to the job's open one (one
        open incident per job: cluster, kind, namespace, name). Returns the incident, whether it
        is new, and the verdict it had before."""
        findings.check_lengths(record)
        return self._write("record finding", lambda conn, _n: findings.record(conn, record))

    def record_findings(
        self,
        records: Sequence[FindingRecord],
        *,
        follow: Callable[[int, FindingOutcome], FollowUp | None] | None = None,
        batch: int = BATCH,
    ) -> list[FindingOutcome]:
        """`record_finding` for each record, `batch` records per transaction; the outcomes in
        their order. For each record `i` that opens an incident, `follow(i, outcome)` names what
        to write with it, in the same transaction (see `agent.store.batches`): it must do no I/O,
        as it runs inside the transaction and again when the transaction is retried. A chunk the
        database refuses raises `StoreUnavailableError`: the chunks before it are recorded,
        with their follow-ups, and recording again counts those as re-detections."""
        for record in records:
            findings.check_lengths(record)
        if batch < 1:
            raise InvalidRecordError(f"record_findings needs a positive batch size, not {batch}")
        out: list[FindingOutcome] = []
        for start in range(0, len(records), batch):
            part = records[start:start + batch]

            def body(conn: Connection, _attempt: int, part: Sequence[FindingRecord] = part,
                     start: int = start) -> list[FindingOutcome]:  # fmt: skip
                chosen = None if follow is None else (lambda i, o: follow(start + i, o))
                return batches.record_many(conn, part, follow=chosen)

            out.extend(self._write(f"record {len(part)} findings", body))
        return out

    def transition(
        self,
        incident_id: int,
        expected: IncidentStatus,
        new: IncidentStatus,
        *,
        actor: str,
        now: datetime,
        detail: Mapping[str, Any] | None = None,
    ) -> TransitionResult:
        """Move `expected -> new` if the incident is still in `expected` (one winner)."""
        check_transition(expected, new)
        token = str(uuid.uuid4())
        return self._write(
            f"transition incident {incident_id} to {new.value}",
            lambda conn, attempt: transitions.transition(
                conn, incident_id, expected=expected, new=new, actor=actor, now=now, token=token,
                attempt=attempt, detail=dict(detail or {}),
            ),
        )

    def record_decision(
        self,
        incident_id: int,
        outcome: DecisionOutcome,
        *,
        actor: Actor,
        now: datetime,
        comment: str | None = None,
        expected: IncidentStatus = IncidentStatus.AWAITING_APPROVAL,
        snoozed_until: datetime | None = None,
    ) -> TransitionResult:
        """Apply a decision (approve, reject, snooze) as one conditional transition plus its audit
        row, atomically. Exactly one concurrent decider wins; losers get the winner's decision."""
        check_transition(expected, DECISION_STATUS[outcome])
        if (outcome is DecisionOutcome.SNOOZE) != (snoozed_until is not None):
            raise LifecycleError("a snooze decision needs snoozed_until, and only a snooze has one")
        if snoozed_until is not None and snoozed_until <= now:
            raise LifecycleError(f"snoozed_until {snoozed_until.isoformat()} is not after now")
        token = str(uuid.uuid4())
        return self._write(
            f"record decision on incident {incident_id}",
            lambda conn, attempt: transitions.record_decision(
                conn, incident_id, outcome, actor=actor, now=now, comment=comment,
                expected=expected, snoozed_until=snoozed_until, token=token, attempt=attempt,
            ),
        )

    def request_approval(
        self, incident_id: int, *, deadline: datetime, now: datetime, actor: str
    ) -> TransitionResult:
        """`open -> awaiting_approval` with its approval deadline, one conditional transition."""
        approval_deadlines.check_deadline(incident_id, deadline=deadline, now=now)
        token = str(uuid.uuid4())
        return self._write(
            f"request approval on incident {incident_id}",
            lambda conn, attempt: approval_deadlines.request_approval(
                conn, incident_id, deadline=deadline, now=now, actor=actor, token=token,
                attempt=attempt),
        )

    def expire_due(self, *, now: datetime) -> list[int]:
        """Expire incidents awaiting approval (or open with a deadline) past their deadline, and
        move snoozes that ended back to awaiting approval; returns the ids it moved."""
        token = str(uuid.uuid4())
        return self._write(
            "expire overdue approvals",
            lambda conn, attempt: approval_deadlines.expire_due(conn, now=now, token=token, attempt=attempt),
        )

    def bind_job_uid(self, incident_id: int, uid: str, *, now: datetime, actor: str) -> str | None:
        """Bind an incident recorded without its job's uid to the job object `uid` (a timeline
        note says so); returns the uid the incident is bound to afterwards (another one when it
        already was; None when there is no such incident). See `findings.bind_uid`."""

        def body(conn: Connection, _attempt: int) -> str | None:
            return findings.bind_uid(conn, incident_id, uid, now=now, actor=actor)

        return self._write(f"bind incident {incident_id} to job uid {uid}", body)

    # ----------------------------------------------------------------------------------------
    # timeline

    def add_event(
        self,
        incident_id: int,
        kind: EventKind,
        *,
        now: datetime,
        actor: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> int:
        """Append a timeline event (evidence, a note, a remediation step); returns its id."""

        def body(conn: Connection, _attempt: int) -> int:
            timeline.touch(conn, incident_id, updated_at=now)
            return timeline.insert_event(conn, incident_id, kind=kind, now=now, actor=actor,
                                         detail=dict(detail or {}))

        return self._write(f"add event to incident {incident_id}", body)

    def add_event_once(
        self,
        incident_id: int,
        kind: EventKind,
        *,
        now: datetime,
        actor: str | None,
        detail: Mapping[str, Any],
        same: tuple[str, ...],
    ) -> int | None:
        """Append a timeline event unless the incident has one of that kind and actor whose
        detail agrees on the keys `same` (a repeated drop message); its id, or None."""
        match = {k: detail.get(k) for k in same}

        def body(conn: Connection, _attempt: int) -> int | None:
            if timeline.has_event(conn, incident_id, kind=kind, actor=actor, detail=match):
                return None
            timeline.touch(conn, incident_id, updated_at=now)
            return timeline.insert_event(conn, incident_id, kind=kind, now=now, actor=actor,
                                         detail=dict(detail))

        return self._write(f"add event to incident {incident_id}", body)

    def record_action(
        self,
        incident_id: int,
        kind: RemediationActionKind,
        *,
        now: datetime,
        actor: str | None = None,
        succeeded: bool | None = None,
        payload: Mapping[str, Any] | None = None,
        message: str | None = None,
        utilization_before: float | None = None,
        utilization_after: float | None = None,
        event: EventKind | None = None,
    ) -> int:
        """Record a remediation step (plan, dry run, apply, verify, rollback) and its timeline
        event (`event` when given, e.g. `plan_previewed` for a plan computed before approval);
        `utilization_before` (measured at planning, kept only where the incident has none)
        and `utilization_after` (from verification) feed the GPU-hours estimate."""
        return self._write(
            f"record action on incident {incident_id}",
            lambda conn, _n: timeline.record_action(
                conn, incident_id, kind, now=now, actor=actor, succeeded=succeeded,
                payload=dict(payload or {}), message=message,
                utilization_before=utilization_before, utilization_after=utilization_after,
                event=event,
            ),
        )

    # ----------------------------------------------------------------------------------------
    # retention

    def purge(self, *, before: datetime, batch: int = 500) -> PurgeResult:
        """Delete incidents closed before `before` with their events, actions and messages, in
        batches (one transaction each). Decision audit rows are kept."""
        totals = PurgeResult(0, 0, 0, 0)
        while True:
            done = self._write(
                "purge old incidents",
                lambda conn, _n: retention.purge_batch(conn, before=before, batch=batch),
            )
            totals = retention.add(totals, done)
            if done.incidents < batch:
                return totals


def open_store(
    settings: DatabaseSettings,
    *,
    url: str,
    readiness: Readiness | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> IncidentStore:
    """Build the store for `url` with the retry budget and timeouts of `settings` (no I/O yet)."""
    return IncidentStore(
        make_engine(url, settings),
        retry=RetryPolicy(budget=settings.write_retry),
        readiness=readiness,
        sleep=sleep,
    )
