"""The incident store's facade: one object over one database, each operation one transaction.

Who calls it: the agent (detection, sweeps, remediation), the chat layer (decisions, outbox) and the
HTTP API and CLI (history queries). Every method takes `now` (no clock reads here) and returns plain
dataclasses from `agent.model.incident`, never ORM rows. Only the store's modules write the incident
tables; this facade runs each of their operations in one transaction:

- findings: `record_finding(record)` -> `FindingOutcome` (`agent.store.findings`);
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
- `purge(before=)` (`agent.store.retention`), `ping()`, `ready()`, `wait_until_reachable()`

Every call retries transient database failures within `database.write_retry` (see
`agent.store.resilience`) and raises `StoreUnavailableError` when they persist: nothing is dropped
silently. Checks that need no database (an allowed transition, a snooze with its end, column
lengths) run before any I/O.

What it does not do: decide when to transition (the agent), render anything, or read a clock.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, text

from agent.model.incident import (
    MAX_INCIDENT_ID,
    Actor,
    ClaimedMessage,
    FindingOutcome,
    FindingRecord,
    FollowUp,
    IncidentDetail,
    IncidentListing,
    IncidentQuery,
    IncidentStats,
    IncidentSummary,
    OutboxMessage,
    PurgeResult,
    TransitionResult,
)
from agent.model.lifecycle import (
    DECISION_STATUS,
    DecisionOutcome,
    EventKind,
    IncidentStatus,
    LifecycleError,
    MessageKind,
    RemediationActionKind,
    ResumeAction,
    check_transition,
)
from agent.settings import DatabaseSettings
from agent.store import (
    approval_deadlines,
    batches,
    findings,
    outbox,
    queries,
    retention,
    timeline,
    transitions,
)
from agent.store.engine import make_engine, read_engine
from agent.store.errors import (
    IncidentNotFoundError,
    InvalidRecordError,
    StoreError,
    StoreUnavailableError,
    safe_url,
)
from agent.store.outbox import OutboxPolicy
from agent.store.resilience import Readiness, Retrier, RetryPolicy
from agent.store.rows import UnreadableError

__all__ = ["IncidentStore", "OutboxPolicy", "open_store"]

T = TypeVar("T")

BATCH = 200  # findings per transaction of `record_findings`


class IncidentStore:
    """The repository over one database (see the module docstring for the surface)."""

    def __init__(
        self,
        engine: Engine,
        *,
        retry: RetryPolicy | None = None,
        outbox: OutboxPolicy | None = None,
        readiness: Readiness | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.engine = engine
        self._reader = read_engine(engine)
        self.readiness = readiness or Readiness()
        self.outbox_policy = outbox or OutboxPolicy()
        self.target = safe_url(engine.url.render_as_string(hide_password=False))
        self._retrier = Retrier(
            target=self.target,
            policy=retry or RetryPolicy(),
            readiness=self.readiness,
            sleep=sleep,
        )

    # ----------------------------------------------------------------------------------------
    # plumbing

    def _write(self, what: str, body: Callable[[Connection, int], T]) -> T:
        def attempt(n: int) -> T:
            with self.engine.begin() as conn:
                return body(conn, n)

        return self._retrier.call(attempt, what=what)

    def _read(self, what: str, body: Callable[[Connection], T]) -> T:
        def attempt(_n: int) -> T:
            with self._reader.begin() as conn:
                return body(conn)

        return self._retrier.call(attempt, what=what)

    def ready(self) -> bool:
        """The readiness flag (last database contact succeeded); never blocks."""
        return self.readiness.is_ready()

    def ping(self) -> bool:
        """One quick round-trip (no retry); updates and returns readiness."""
        try:
            self._retrier.call(
                lambda _n: self._read_one("SELECT 1"), what="ping", budget=timedelta(0)
            )
        except (StoreError, StoreUnavailableError) as exc:
            self.readiness.mark_unready(str(exc))
            return False
        return True

    def _read_one(self, sql: str) -> Any:
        with self._reader.connect() as conn:
            return conn.execute(text(sql)).scalar()

    def wait_until_reachable(self, timeout: timedelta) -> None:
        """Block until the database answers, retrying with backoff; `StoreUnavailableError` after
        `timeout` (the start-up path: the health endpoint reports not ready meanwhile)."""
        self._retrier.call(lambda _n: self._read_one("SELECT 1"), what="connect", budget=timeout)

    def close(self) -> None:
        self.engine.dispose()

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
    # outbox

    def enqueue_message(
        self,
        kind: MessageKind,
        *,
        payload: Mapping[str, Any],
        now: datetime,
        incident_id: int | None = None,
        channel: str | None = None,
        dedupe_key: str | None = None,
    ) -> int:
        """Queue a message for delivery; with a `dedupe_key` already queued, returns that id."""
        return self._write(
            "enqueue message",
            lambda conn, _n: outbox.enqueue(conn, kind, payload=payload, now=now,
                                            incident_id=incident_id, channel=channel,
                                            dedupe_key=dedupe_key),
        )

    def claim_messages(
        self, *, now: datetime, limit: int = 20, lease: timedelta
    ) -> list[ClaimedMessage]:
        """Claim up to `limit` due messages, oldest first, each with a fresh token until
        `now + lease` (two deliverers never hold one message; an expired claim can be taken
        over; a message waits while an earlier one of its incident is pending)."""
        if lease <= timedelta(0) or limit < 1:
            raise InvalidRecordError(f"claim needs a positive lease and limit, not {lease}, {limit}")
        return self._write("claim due messages",
                           lambda conn, _n: outbox.claim(conn, now=now, limit=limit, lease=lease))

    def mark_delivered(
        self, message_id: int, *, token: str, now: datetime, external_ref: str | None = None
    ) -> bool:
        """The message was delivered: applies only while claim `token` holds the pending message
        (returns whether it applied); a delivered post adds a `posted` event to its incident."""
        return self._write(
            f"mark message {message_id} delivered",
            lambda conn, attempt: outbox.mark_delivered(
                conn, message_id, token=token, now=now, external_ref=external_ref,
                attempt=attempt),
        )

    def mark_failed(
        self, message_id: int, *, token: str, now: datetime, error: str
    ) -> OutboxMessage | None:
        """A delivery attempt failed: while claim `token` holds the pending message, release it and
        schedule the next attempt with backoff, or mark it dead after `max_attempts` (dead messages
        stay with their last error). Returns the message as it now stands, or None when the claim
        no longer held it (nothing changed)."""
        policy = self.outbox_policy
        try:
            return self._write(
                f"mark message {message_id} failed",
                lambda conn, attempt: outbox.mark_failed(conn, message_id, token=token, now=now,
                                                         error=error, policy=policy,
                                                         attempt=attempt),
            )
        except UnreadableError as exc:
            raise StoreError(f"outbox message {message_id} cannot be read: {exc}") from None

    # ----------------------------------------------------------------------------------------
    # history

    def list_incidents(self, query: IncidentQuery | None = None) -> IncidentListing:
        """Incidents matching `query`, newest first. Rows that cannot be read are reported in
        `problems` (naming the incident) instead of failing the listing."""
        chosen = query or IncidentQuery()
        return self._read("list incidents", lambda conn: queries.list_incidents(conn, chosen))

    def open_counts(self, *, cluster: str) -> dict[tuple[str, str], int]:
        """Open incidents of `cluster` counted by (verdict, status): one grouped query, for the
        agent's `zonemedic_incidents` gauge (no rows are materialized)."""
        return self._read("count open incidents",
                          lambda conn: queries.open_counts(conn, cluster=cluster))

    def get_incident(self, incident_id: int) -> IncidentDetail:
        """One incident with its timeline, decisions, actions and messages."""
        if not 1 <= incident_id <= MAX_INCIDENT_ID:  # no such row; PostgreSQL would overflow
            raise IncidentNotFoundError(incident_id)
        return self._read(f"read incident {incident_id}",
                          lambda conn: queries.get_incident(conn, incident_id))

    def stats(self, *, since: datetime, now: datetime) -> IncidentStats:
        """Counts by verdict and outcome, mean times to detect/decide/resolve and GPU-hours
        recovered, over incidents opened in [since, now] (see `agent.store.queries.stats`)."""
        return self._read("compute incident stats",
                          lambda conn: queries.stats(conn, since=since, now=now))

    def incidents_to_resume(self) -> list[tuple[IncidentSummary, ResumeAction]]:
        """Every open incident with what a (re)starting agent must do for it (see
        `agent.model.lifecycle.resume_action`). Unreadable rows are skipped here and reported
        by `list_incidents`."""
        return self._read("list incidents to resume", queries.incidents_to_resume)

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
