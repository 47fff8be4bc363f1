"""The incident store's API: record findings, apply lifecycle transitions, audit, outbox, history.

Who calls it: the agent (detection, sweeps, remediation), the chat layer (decisions, outbox) and the
HTTP API and CLI (history queries). It is the only module that writes incident tables. Every method
takes `now` (no clock reads here) and returns plain dataclasses from `agent.model.incident`, never
ORM rows.

The surface (small on purpose):
- `record_finding(record)` -> `FindingOutcome` (opens an incident, or re-detects the open one)
- `transition(id, expected, new, *, actor, now)` -> `TransitionResult` (one conditional UPDATE)
- `record_decision(id, outcome, *, actor, now)` -> `TransitionResult` (transition + decision row)
- `add_event`, `record_action`
- `enqueue_message`, `due_messages`, `mark_delivered`, `mark_failed` (the outbox)
- `list_incidents(query)`, `get_incident(id)`, `stats(since=, now=)`, `incidents_to_resume()`
- `purge(before=)` (retention: see `agent.store.retention`), `ping()`, `ready()`, `wait_until_reachable()`

Concurrency: a transition is `UPDATE incidents SET status=new ... WHERE id=:id AND status=:expected`
in the same transaction as its timeline event (and decision row); exactly one concurrent caller sees
one updated row. Losers read the current status, who set it and the winning decision. Every call
retries transient database failures within `database.write_retry` (see `agent.store.resilience`) and
raises `StoreUnavailableError` when they persist: nothing is dropped silently.

What it does not do: decide when to transition (the agent), render anything, or read a clock.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import (
    Connection,
    Engine,
    and_,
    bindparam,
    func,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.exc import IntegrityError

from agent.model.incident import (
    Actor,
    Decision,
    FindingOutcome,
    FindingRecord,
    IncidentDetail,
    IncidentListing,
    IncidentQuery,
    IncidentStats,
    IncidentSummary,
    OutboxMessage,
    PurgeResult,
    RecordProblem,
    RemediationAction,
    TimelineEvent,
    TransitionResult,
)
from agent.model.lifecycle import (
    DECISION_STATUS,
    OPEN_STATUSES,
    DecisionOutcome,
    DecisionSource,
    EventKind,
    IncidentStatus,
    LifecycleError,
    MessageKind,
    MessageStatus,
    RemediationActionKind,
    ResumeAction,
    Severity,
    check_transition,
    event_for_status,
    is_terminal,
    resume_action,
    retry_delay,
)
from agent.model.verdict import Verdict
from agent.settings import DatabaseSettings
from agent.store import retention
from agent.store.engine import make_engine, read_engine
from agent.store.errors import (
    CorruptRecordError,
    IncidentNotFoundError,
    InvalidRecordError,
    MessageNotFoundError,
    StoreError,
    StoreUnavailableError,
    safe_url,
)
from agent.store.resilience import Readiness, Retrier, RetryPolicy
from agent.store.schema import ActionRow, DecisionRow, IncidentEventRow, IncidentRow, OutboxRow
from agent.store.types import CorruptValue, UTCDateTime

T = TypeVar("T")

_SUMMARY_COLUMNS = (
    IncidentRow.id,
    IncidentRow.cluster,
    IncidentRow.job_kind,
    IncidentRow.job_namespace,
    IncidentRow.job_name,
    IncidentRow.job_uid,
    IncidentRow.verdict,
    IncidentRow.status,
    IncidentRow.severity,
    IncidentRow.fingerprint,
    IncidentRow.target_zone,
    IncidentRow.opened_at,
    IncidentRow.updated_at,
    IncidentRow.closed_at,
    IncidentRow.status_by,
    IncidentRow.utilization_before,
    IncidentRow.utilization_after,
    IncidentRow.estimated_cost,
    IncidentRow.gpus,
    IncidentRow.detections,
)

# Statuses before remediation starts: a re-detection may still refresh "utilization before".
_PRE_REMEDIATION = frozenset(
    {IncidentStatus.OPEN, IncidentStatus.AWAITING_APPROVAL, IncidentStatus.SNOOZED}
)


@dataclass(frozen=True)
class OutboxPolicy:
    """Delivery retries: exponential from `base` up to `cap`; after `max_attempts` a message is dead
    (kept, visible, reported), never silently dropped."""

    base: timedelta = timedelta(seconds=5)
    cap: timedelta = timedelta(minutes=15)
    max_attempts: int = 12
    lease: timedelta = timedelta(seconds=60)


class _UnreadableError(Exception):
    """A stored value the code cannot interpret (internal; becomes RecordProblem/CorruptRecordError)."""


def _enum(enum_type: Any, value: Any, *, column: str) -> Any:
    try:
        return enum_type(value)
    except ValueError:
        raise _UnreadableError(f"unknown {column} value {value!r}") from None


def _document(value: Any, column: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if isinstance(value, CorruptValue):
        raise _UnreadableError(f"column {column} holds invalid JSON ({value.error}): {value.raw[:60]!r}")
    if not isinstance(value, dict):
        raise _UnreadableError(f"column {column} holds JSON {type(value).__name__}, not an object")
    return value


def _summary(row: Any) -> IncidentSummary:
    return IncidentSummary(
        id=row.id,
        cluster=row.cluster,
        kind=row.job_kind,
        namespace=row.job_namespace,
        name=row.job_name,
        uid=row.job_uid,
        verdict=_enum(Verdict, row.verdict, column="verdict"),
        status=_enum(IncidentStatus, row.status, column="status"),
        severity=_enum(Severity, row.severity, column="severity"),
        fingerprint=row.fingerprint,
        target_zone=row.target_zone,
        opened_at=row.opened_at,
        updated_at=row.updated_at,
        closed_at=row.closed_at,
        status_by=row.status_by,
        utilization_before=row.utilization_before,
        utilization_after=row.utilization_after,
        estimated_cost=row.estimated_cost,
        gpus=row.gpus,
        detections=row.detections,
    )


def _decision(row: Any) -> Decision:
    return Decision(
        id=row.id,
        incident_id=row.incident_id,
        outcome=_enum(DecisionOutcome, row.outcome, column="decision outcome"),
        actor_id=row.actor_id,
        actor_name=row.actor_name,
        source=_enum(DecisionSource, row.source, column="decision source"),
        decided_at=row.decided_at,
        comment=row.comment,
        job=f"{row.job_namespace}/{row.job_name}",
    )


def _message(row: Any) -> OutboxMessage:
    return OutboxMessage(
        id=row.id,
        incident_id=row.incident_id,
        kind=_enum(MessageKind, row.kind, column="message kind"),
        channel=row.channel,
        payload=_document(row.payload, "payload"),
        dedupe_key=row.dedupe_key,
        status=_enum(MessageStatus, row.status, column="message status"),
        attempts=row.attempts,
        next_attempt_at=row.next_attempt_at,
        created_at=row.created_at,
        delivered_at=row.delivered_at,
        last_error=row.last_error,
        external_ref=row.external_ref,
    )


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
    # findings

    def record_finding(self, record: FindingRecord) -> FindingOutcome:
        """Open an incident for the finding, or add a re-detection to the open one (dedupe by
        fingerprint: cluster, job, verdict class). Returns the incident and whether it is new."""
        _check_lengths(record)
        fp = record.fingerprint

        def body(conn: Connection, _attempt: int) -> FindingOutcome:
            existing = self._open_by_fingerprint(conn, fp)
            if existing is None:
                try:
                    with conn.begin_nested():
                        incident_id = self._insert_incident(conn, record, fp=fp)
                except IntegrityError:
                    existing = self._open_by_fingerprint(conn, fp)
                    if existing is None:  # pragma: no cover - the winner closed it already
                        raise
                else:
                    return FindingOutcome(incident=self._summary_by_id(conn, incident_id), new=True)
            self._redetect(conn, existing, record=record)
            return FindingOutcome(incident=self._summary_by_id(conn, existing), new=False)

        return self._write("record finding", body)

    @staticmethod
    def _open_by_fingerprint(conn: Connection, fp: str) -> int | None:
        return conn.execute(
            select(IncidentRow.id).where(
                IncidentRow.fingerprint == fp, IncidentRow.closed_at.is_(None)
            )
        ).scalar()

    @staticmethod
    def _insert_incident(conn: Connection, record: FindingRecord, *, fp: str) -> int:
        now = record.detected_at
        incident_id: int = conn.execute(
            insert(IncidentRow)
            .values(
                cluster=record.cluster,
                job_kind=record.kind,
                job_namespace=record.namespace,
                job_name=record.name,
                job_uid=record.uid,
                verdict=record.verdict.value,
                fingerprint=fp,
                status=IncidentStatus.OPEN.value,
                status_by="detector",
                severity=record.effective_severity.value,
                opened_at=now,
                updated_at=now,
                onset_at=record.onset_at,
                target_zone=record.target_zone,
                diagnosis=dict(record.diagnosis),
                utilization_before=record.utilization_now,
                estimated_cost=record.estimated_cost,
                gpus=record.gpus,
                detections=1,
            )
            .returning(IncidentRow.id)
        ).scalar_one()
        conn.execute(
            insert(IncidentEventRow).values(
                incident_id=incident_id,
                at=now,
                kind=EventKind.DETECTED.value,
                actor="detector",
                detail=_evidence(record),
            )
        )
        return incident_id

    @staticmethod
    def _redetect(conn: Connection, incident_id: int, *, record: FindingRecord) -> None:
        status = conn.execute(
            select(IncidentRow.status).where(IncidentRow.id == incident_id)
        ).scalar_one()
        values: dict[str, Any] = {
            "updated_at": record.detected_at,
            "detections": IncidentRow.detections + 1,
            "verdict": record.verdict.value,
            "severity": record.effective_severity.value,
            "diagnosis": dict(record.diagnosis),
        }
        if record.target_zone is not None:
            values["target_zone"] = record.target_zone
        if record.estimated_cost is not None:
            values["estimated_cost"] = record.estimated_cost
        if record.gpus is not None:
            values["gpus"] = record.gpus
        if record.utilization_now is not None and status in _PRE_REMEDIATION:
            values["utilization_before"] = record.utilization_now
        conn.execute(update(IncidentRow).where(IncidentRow.id == incident_id).values(**values))
        conn.execute(
            insert(IncidentEventRow).values(
                incident_id=incident_id,
                at=record.detected_at,
                kind=EventKind.REDETECTED.value,
                actor="detector",
                detail=_evidence(record),
            )
        )

    # ----------------------------------------------------------------------------------------
    # lifecycle

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

        def body(conn: Connection, attempt: int) -> TransitionResult:
            won = self._conditional_update(
                conn, incident_id, expected=expected, new=new, actor=actor, token=token, now=now
            )
            if won is None:
                return self._lost(conn, incident_id, new=new, token=token, attempt=attempt,
                                  expected=expected)
            self._event(conn, incident_id, kind=event_for_status(new), now=now, actor=actor,
                        detail=dict(detail or {}))
            return TransitionResult(incident_id, True, new, actor, previous=expected)

        return self._write(f"transition incident {incident_id} to {new.value}", body)

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
        new = DECISION_STATUS[outcome]
        check_transition(expected, new)
        if (outcome is DecisionOutcome.SNOOZE) != (snoozed_until is not None):
            raise LifecycleError("a snooze decision needs snoozed_until, and only a snooze has one")
        token = str(uuid.uuid4())

        def body(conn: Connection, attempt: int) -> TransitionResult:
            extra: dict[str, Any] = {
                "decided_at": func.coalesce(IncidentRow.decided_at, now),
            }
            if outcome is DecisionOutcome.SNOOZE:
                extra["snoozed_until"] = snoozed_until
            won = self._conditional_update(
                conn, incident_id, expected=expected, new=new, actor=actor.label, token=token,
                now=now,
                extra=extra,
            )
            if won is None:
                return self._lost(conn, incident_id, new=new, token=token, attempt=attempt,
                                  expected=expected)
            decision_id = conn.execute(
                insert(DecisionRow)
                .values(
                    incident_id=incident_id,
                    cluster=won.cluster,
                    job_namespace=won.job_namespace,
                    job_name=won.job_name,
                    verdict=won.verdict,
                    outcome=outcome.value,
                    actor_id=actor.id,
                    actor_name=actor.name,
                    source=actor.source.value,
                    decided_at=now,
                    comment=comment,
                )
                .returning(DecisionRow.id)
            ).scalar_one()
            detail: dict[str, Any] = {"outcome": outcome.value, "source": actor.source.value,
                                      "actor_id": actor.id}
            if comment:
                detail["comment"] = comment
            if snoozed_until is not None:
                detail["snoozed_until"] = snoozed_until.isoformat()
            self._event(conn, incident_id, kind=event_for_status(new), now=now, actor=actor.label,
                        detail=detail)
            decision = Decision(
                id=decision_id, incident_id=incident_id, outcome=outcome, actor_id=actor.id,
                actor_name=actor.name, source=actor.source, decided_at=now, comment=comment,
                job=f"{won.job_namespace}/{won.job_name}",
            )
            return TransitionResult(incident_id, True, new, actor.label, previous=expected,
                                    decision=decision)

        return self._write(f"record decision on incident {incident_id}", body)

    @staticmethod
    def _conditional_update(
        conn: Connection,
        incident_id: int,
        *,
        expected: IncidentStatus,
        new: IncidentStatus,
        actor: str,
        token: str,
        now: datetime,
        extra: Mapping[str, Any] | None = None,
    ) -> Any:
        values: dict[str, Any] = {
            "status": new.value,
            "status_by": actor,
            "status_token": token,
            "updated_at": now,
            **(extra or {}),
        }
        if is_terminal(new):
            values["closed_at"] = now
        return conn.execute(
            update(IncidentRow)
            .where(IncidentRow.id == incident_id, IncidentRow.status == expected.value)
            .values(**values)
            .returning(
                IncidentRow.cluster, IncidentRow.job_namespace, IncidentRow.job_name,
                IncidentRow.verdict,
            )
        ).first()

    def _lost(
        self,
        conn: Connection,
        incident_id: int,
        *,
        new: IncidentStatus,
        token: str,
        attempt: int,
        expected: IncidentStatus,
    ) -> TransitionResult:
        row = conn.execute(
            select(IncidentRow.status, IncidentRow.status_by, IncidentRow.status_token).where(
                IncidentRow.id == incident_id
            )
        ).first()
        if row is None:
            raise IncidentNotFoundError(incident_id)
        try:
            status = _enum(IncidentStatus, row.status, column="status")
        except _UnreadableError as exc:
            raise CorruptRecordError(incident_id, str(exc)) from None
        decision = self._latest_decision(conn, incident_id)
        # A retry after a COMMIT whose answer was lost: the row carries our own token.
        applied = attempt > 1 and row.status_token == token and status is new
        return TransitionResult(
            incident_id, applied, status, row.status_by,
            previous=expected if applied else None, decision=decision,
        )

    @staticmethod
    def _latest_decision(conn: Connection, incident_id: int) -> Decision | None:
        row = conn.execute(
            select(DecisionRow)
            .where(DecisionRow.incident_id == incident_id)
            .order_by(DecisionRow.id.desc())
            .limit(1)
        ).first()
        if row is None:
            return None
        try:
            return _decision(row)
        except _UnreadableError as exc:
            raise CorruptRecordError(incident_id, str(exc)) from None

    @staticmethod
    def _event(
        conn: Connection,
        incident_id: int,
        *,
        kind: EventKind,
        now: datetime,
        actor: str | None,
        detail: Mapping[str, Any],
    ) -> int:
        event_id: int = conn.execute(
            insert(IncidentEventRow)
            .values(incident_id=incident_id, at=now, kind=kind.value, actor=actor,
                    detail=dict(detail))
            .returning(IncidentEventRow.id)
        ).scalar_one()
        return event_id

    def _require(self, conn: Connection, incident_id: int) -> None:
        if conn.execute(select(IncidentRow.id).where(IncidentRow.id == incident_id)).first() is None:
            raise IncidentNotFoundError(incident_id)

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
            self._require(conn, incident_id)
            event_id = self._event(conn, incident_id, kind=kind, now=now, actor=actor,
                                   detail=dict(detail or {}))
            conn.execute(
                update(IncidentRow).where(IncidentRow.id == incident_id).values(updated_at=now)
            )
            return event_id

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
        utilization_after: float | None = None,
    ) -> int:
        """Record a remediation step (plan, dry run, apply, verify, rollback) and its timeline
        event; `utilization_after` (from verification) feeds the GPU-hours estimate."""

        def body(conn: Connection, _attempt: int) -> int:
            self._require(conn, incident_id)
            action_id: int = conn.execute(
                insert(ActionRow)
                .values(incident_id=incident_id, kind=kind.value, at=now, actor=actor,
                        succeeded=succeeded, payload=dict(payload or {}), message=message)
                .returning(ActionRow.id)
            ).scalar_one()
            values: dict[str, Any] = {"updated_at": now}
            if utilization_after is not None:
                values["utilization_after"] = utilization_after
            conn.execute(update(IncidentRow).where(IncidentRow.id == incident_id).values(**values))
            event_kind = EventKind.VERIFIED if kind is RemediationActionKind.VERIFY and succeeded else (
                EventKind.REMEDIATION_STEP
            )
            detail: dict[str, Any] = {"action": kind.value, "action_id": action_id,
                                      "succeeded": succeeded}
            if message:
                detail["message"] = message
            self._event(conn, incident_id, kind=event_kind, now=now, actor=actor, detail=detail)
            return action_id

        return self._write(f"record action on incident {incident_id}", body)

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

        def body(conn: Connection, _attempt: int) -> int:
            if dedupe_key is not None:
                existing = conn.execute(
                    select(OutboxRow.id).where(OutboxRow.dedupe_key == dedupe_key)
                ).scalar()
                if existing is not None:
                    return int(existing)
            try:
                with conn.begin_nested():
                    message_id: int = conn.execute(
                        insert(OutboxRow)
                        .values(incident_id=incident_id, kind=kind.value, channel=channel,
                                payload=dict(payload), dedupe_key=dedupe_key,
                                status=MessageStatus.PENDING.value, attempts=0,
                                next_attempt_at=now, created_at=now)
                        .returning(OutboxRow.id)
                    ).scalar_one()
            except IntegrityError:
                if dedupe_key is None:
                    if incident_id is not None:
                        raise IncidentNotFoundError(incident_id) from None
                    raise
                again = conn.execute(
                    select(OutboxRow.id).where(OutboxRow.dedupe_key == dedupe_key)
                ).scalar()
                if again is None:
                    if incident_id is not None:
                        raise IncidentNotFoundError(incident_id) from None
                    raise
                return int(again)
            return message_id

        return self._write("enqueue message", body)

    def due_messages(self, *, now: datetime, limit: int = 20) -> list[OutboxMessage]:
        """Claim up to `limit` pending messages whose next attempt is due, oldest first.

        Claiming pushes `next_attempt_at` to `now + lease` with a conditional UPDATE, so two
        deliverers never take the same message, and a deliverer that dies before `mark_delivered`
        or `mark_failed` lets the message come back after the lease."""
        lease_until = now + self.outbox_policy.lease

        def body(conn: Connection, _attempt: int) -> list[OutboxMessage]:
            rows = conn.execute(
                select(OutboxRow)
                .where(OutboxRow.status == MessageStatus.PENDING.value,
                       OutboxRow.next_attempt_at <= now)
                .order_by(OutboxRow.next_attempt_at, OutboxRow.id)
                .limit(limit)
            ).all()
            claimed: list[OutboxMessage] = []
            for row in rows:
                result = conn.execute(
                    update(OutboxRow)
                    .where(OutboxRow.id == row.id,
                           OutboxRow.status == MessageStatus.PENDING.value,
                           OutboxRow.next_attempt_at <= now)
                    .values(next_attempt_at=lease_until)
                )
                if result.rowcount == 1:
                    try:
                        claimed.append(_message(row))
                    except _UnreadableError as exc:
                        # Unreadable: make it dead so it stops coming back, and say why.
                        conn.execute(
                            update(OutboxRow).where(OutboxRow.id == row.id)
                            .values(status=MessageStatus.DEAD.value, last_error=str(exc))
                        )
            return claimed

        return self._write("claim due messages", body)

    def mark_delivered(
        self, message_id: int, *, now: datetime, external_ref: str | None = None
    ) -> None:
        """The message was delivered; a delivered post adds a `posted` event to its incident."""

        def body(conn: Connection, _attempt: int) -> None:
            row = conn.execute(
                update(OutboxRow)
                .where(OutboxRow.id == message_id)
                .values(status=MessageStatus.DELIVERED.value, delivered_at=now,
                        attempts=OutboxRow.attempts + 1, external_ref=external_ref,
                        last_error=None)
                .returning(OutboxRow.incident_id, OutboxRow.kind, OutboxRow.channel)
            ).first()
            if row is None:
                raise MessageNotFoundError(message_id)
            if row.incident_id is not None and row.kind == MessageKind.POST.value:
                self._event(conn, row.incident_id, kind=EventKind.POSTED, now=now, actor="outbox",
                            detail={"channel": row.channel, "ref": external_ref,
                                    "message_id": message_id})

        self._write(f"mark message {message_id} delivered", body)

    def mark_failed(self, message_id: int, *, now: datetime, error: str) -> OutboxMessage:
        """A delivery attempt failed: schedule the next with backoff, or mark it dead after
        `max_attempts` (dead messages stay in the table with their last error)."""
        policy = self.outbox_policy

        def body(conn: Connection, _attempt: int) -> OutboxMessage:
            attempts = conn.execute(
                select(OutboxRow.attempts).where(OutboxRow.id == message_id)
            ).scalar()
            if attempts is None:
                raise MessageNotFoundError(message_id)
            attempts += 1
            status = MessageStatus.DEAD if attempts >= policy.max_attempts else (
                MessageStatus.PENDING
            )
            delay = retry_delay(attempts, base=policy.base, cap=policy.cap)
            row = conn.execute(
                update(OutboxRow)
                .where(OutboxRow.id == message_id)
                .values(attempts=attempts, status=status.value, next_attempt_at=now + delay,
                        last_error=error[:2000])
                .returning(*OutboxRow.__table__.c)
            ).one()
            return _message(row)

        try:
            return self._write(f"mark message {message_id} failed", body)
        except _UnreadableError as exc:
            raise StoreError(f"outbox message {message_id} cannot be read: {exc}") from None

    # ----------------------------------------------------------------------------------------
    # history

    def list_incidents(self, query: IncidentQuery | None = None) -> IncidentListing:
        """Incidents matching `query`, newest first. Rows that cannot be read are reported in
        `problems` (naming the incident) instead of failing the listing."""
        query = query or IncidentQuery()
        conditions: list[Any] = []
        if query.cluster is not None:
            conditions.append(IncidentRow.cluster == query.cluster)
        if query.namespace is not None:
            conditions.append(IncidentRow.job_namespace == query.namespace)
        if query.name is not None:
            conditions.append(IncidentRow.job_name == query.name)
        if query.uid is not None:
            conditions.append(IncidentRow.job_uid == query.uid)
        if query.status is not None:
            conditions.append(IncidentRow.status == query.status.value)
        if query.verdict is not None:
            conditions.append(IncidentRow.verdict == query.verdict.value)
        if query.since is not None:
            conditions.append(IncidentRow.opened_at >= query.since)
        if query.open_only:
            conditions.append(IncidentRow.closed_at.is_(None))
        statement = (
            select(*_SUMMARY_COLUMNS)
            .where(and_(True, *conditions))
            .order_by(IncidentRow.opened_at.desc(), IncidentRow.id.desc())
            .limit(max(0, query.limit))
        )

        def body(conn: Connection) -> IncidentListing:
            incidents: list[IncidentSummary] = []
            problems: list[RecordProblem] = []
            for row in conn.execute(statement):
                try:
                    incidents.append(_summary(row))
                except _UnreadableError as exc:
                    problems.append(RecordProblem(row.id, str(exc)))
            return IncidentListing(incidents, problems)

        return self._read("list incidents", body)

    def open_counts(self, *, cluster: str) -> dict[tuple[str, str], int]:
        """Open incidents of `cluster` counted by (verdict, status): one grouped query, for the
        agent's `zonemedic_incidents` gauge (no rows are materialized)."""
        statement = (
            select(IncidentRow.verdict, IncidentRow.status, func.count())
            .where(IncidentRow.cluster == cluster, IncidentRow.closed_at.is_(None))
            .group_by(IncidentRow.verdict, IncidentRow.status)
        )

        def body(conn: Connection) -> dict[tuple[str, str], int]:
            return {(str(v), str(s)): int(n) for v, s, n in conn.execute(statement)}

        return self._read("count open incidents", body)

    def _summary_by_id(self, conn: Connection, incident_id: int) -> IncidentSummary:
        row = conn.execute(select(*_SUMMARY_COLUMNS).where(IncidentRow.id == incident_id)).first()
        if row is None:
            raise IncidentNotFoundError(incident_id)
        try:
            return _summary(row)
        except _UnreadableError as exc:
            raise CorruptRecordError(incident_id, str(exc)) from None

    def get_incident(self, incident_id: int) -> IncidentDetail:
        """One incident with its timeline, decisions, actions and messages."""

        def body(conn: Connection) -> IncidentDetail:
            summary = self._summary_by_id(conn, incident_id)
            row = conn.execute(
                select(IncidentRow.diagnosis, IncidentRow.onset_at, IncidentRow.decided_at,
                       IncidentRow.snoozed_until).where(IncidentRow.id == incident_id)
            ).one()
            try:
                diagnosis = _document(row.diagnosis, "diagnosis")
                events = [
                    TimelineEvent(id=e.id, incident_id=incident_id, at=e.at,
                                  kind=_enum(EventKind, e.kind, column="event kind"), actor=e.actor,
                                  detail=_document(e.detail, f"detail of event {e.id}"))
                    for e in conn.execute(
                        select(IncidentEventRow)
                        .where(IncidentEventRow.incident_id == incident_id)
                        .order_by(IncidentEventRow.at, IncidentEventRow.id)
                    )
                ]
                decisions = [
                    _decision(d) for d in conn.execute(
                        select(DecisionRow).where(DecisionRow.incident_id == incident_id)
                        .order_by(DecisionRow.id)
                    )
                ]
                actions = [
                    RemediationAction(id=a.id, incident_id=incident_id, at=a.at,
                                      kind=_enum(RemediationActionKind, a.kind, column="action kind"),
                                      actor=a.actor, succeeded=a.succeeded,
                                      payload=_document(a.payload, f"payload of action {a.id}"),
                                      message=a.message)
                    for a in conn.execute(
                        select(ActionRow).where(ActionRow.incident_id == incident_id)
                        .order_by(ActionRow.at, ActionRow.id)
                    )
                ]
                messages = [
                    _message(m) for m in conn.execute(
                        select(OutboxRow).where(OutboxRow.incident_id == incident_id)
                        .order_by(OutboxRow.id)
                    )
                ]
            except _UnreadableError as exc:
                raise CorruptRecordError(incident_id, str(exc)) from None
            return IncidentDetail(
                incident=summary, diagnosis=diagnosis, onset_at=row.onset_at,
                decided_at=row.decided_at, snoozed_until=row.snoozed_until, events=events,
                decisions=decisions, actions=actions, messages=messages,
            )

        return self._read(f"read incident {incident_id}", body)

    def stats(self, *, since: datetime, now: datetime) -> IncidentStats:
        """Counts by verdict and outcome, mean times to detect/decide/resolve and GPU-hours
        recovered, over incidents opened in [since, now]: one aggregate query grouped by verdict
        and status (sums and counts per group, combined here), served by the opened_at index.

        Time to detect: onset -> opened; to decide: opened -> first decision; to resolve: opened
        -> closed, for resolved incidents. GPU-hours: `gpu_hours_recovered` of the model, in SQL.
        """
        seconds = _seconds_between_sql(self.engine.dialect.name)
        aggregate = text(
            "SELECT verdict, status, COUNT(*) AS n, "
            f"SUM({seconds('onset_at', 'opened_at')}) AS ttd_sum, COUNT(onset_at) AS ttd_n, "
            f"SUM({seconds('opened_at', 'decided_at')}) AS dec_sum, COUNT(decided_at) AS dec_n, "
            f"SUM(CASE WHEN status = :resolved THEN {seconds('opened_at', 'closed_at')} END) "
            "AS ttr_sum, "
            "SUM(CASE WHEN status = :resolved AND closed_at IS NOT NULL THEN 1 ELSE 0 END) "
            "AS ttr_n, "
            "SUM(CASE WHEN status = :resolved AND gpus IS NOT NULL "
            "AND utilization_before IS NOT NULL AND utilization_after IS NOT NULL "
            "AND closed_at < :until AND utilization_after > utilization_before "
            "THEN gpus * (utilization_after - utilization_before) / 100.0 * "
            f"{seconds('closed_at', ':until')} / 3600.0 ELSE 0 END) AS gpu_hours "
            "FROM incidents WHERE opened_at >= :since AND opened_at <= :until "
            "GROUP BY verdict, status"
        ).bindparams(_dt("since", since), _dt("until", now), resolved=IncidentStatus.RESOLVED.value)

        def body(conn: Connection) -> IncidentStats:
            by_verdict: dict[str, int] = {}
            by_outcome: dict[str, int] = {}
            sums = {"ttd": [0.0, 0], "dec": [0.0, 0], "ttr": [0.0, 0]}
            total, gpu_hours = 0, 0.0
            for row in conn.execute(aggregate):
                by_verdict[row.verdict] = by_verdict.get(row.verdict, 0) + row.n
                by_outcome[row.status] = by_outcome.get(row.status, 0) + row.n
                total += row.n
                gpu_hours += float(row.gpu_hours or 0.0)
                for key, acc in sums.items():
                    acc[0] += float(getattr(row, f"{key}_sum") or 0.0)
                    acc[1] += int(getattr(row, f"{key}_n") or 0)
            means = {k: _td(v[0] / v[1]) if v[1] else None for k, v in sums.items()}
            return IncidentStats(
                since=since, until=now, total=total,
                by_verdict=dict(sorted(by_verdict.items())),
                by_outcome=dict(sorted(by_outcome.items())),
                mean_time_to_detect=means["ttd"], mean_time_to_decide=means["dec"],
                mean_time_to_resolve=means["ttr"], gpu_hours_recovered=gpu_hours,
            )

        return self._read("compute incident stats", body)

    def incidents_to_resume(self) -> list[tuple[IncidentSummary, ResumeAction]]:
        """Every open incident with what a (re)starting agent must do for it (see
        `agent.model.incident.resume_action`). Unreadable rows are skipped here and reported
        by `list_incidents`."""
        statement = (
            select(*_SUMMARY_COLUMNS)
            .where(IncidentRow.closed_at.is_(None),
                   IncidentRow.status.in_([s.value for s in OPEN_STATUSES]))
            .order_by(IncidentRow.id)
        )

        def body(conn: Connection) -> list[tuple[IncidentSummary, ResumeAction]]:
            out: list[tuple[IncidentSummary, ResumeAction]] = []
            for row in conn.execute(statement):
                try:
                    summary = _summary(row)
                except _UnreadableError:
                    continue
                out.append((summary, resume_action(summary.status)))
            return out

        return self._read("list incidents to resume", body)

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


_LIMITED_FIELDS = {
    "cluster": IncidentRow.cluster,
    "kind": IncidentRow.job_kind,
    "namespace": IncidentRow.job_namespace,
    "name": IncidentRow.job_name,
    "uid": IncidentRow.job_uid,
    "target_zone": IncidentRow.target_zone,
}


def _check_lengths(record: FindingRecord) -> None:
    """Refuse values longer than their column on every backend (SQLite would store them,
    PostgreSQL would fail with a driver error)."""
    for field_name, column in _LIMITED_FIELDS.items():
        value = getattr(record, field_name)
        limit = getattr(column.type, "length", None)
        if value is not None and limit is not None and len(value) > limit:
            raise InvalidRecordError(
                f"finding {record.namespace}/{record.name}: {field_name} is {len(value)} "
                f"characters, at most {limit} fit"
            )


def _evidence(record: FindingRecord) -> dict[str, Any]:
    detail: dict[str, Any] = {"verdict": record.verdict.value}
    if record.target_zone is not None:
        detail["target_zone"] = record.target_zone
    if record.utilization_now is not None:
        detail["utilization_now"] = record.utilization_now
    if record.utilization_baseline is not None:
        detail["utilization_baseline"] = record.utilization_baseline
    return detail


def _dt(name: str, value: datetime) -> Any:
    return bindparam(name, value, type_=UTCDateTime())


def _seconds_between_sql(dialect: str) -> Callable[[str, str], str]:
    """SQL for the seconds from column/param `a` to `b`, per backend."""
    if dialect == "postgresql":
        return lambda a, b: f"EXTRACT(EPOCH FROM ({b} - {a}))"
    return lambda a, b: f"((julianday({b}) - julianday({a})) * 86400.0)"


def _td(seconds: Any) -> timedelta | None:
    return None if seconds is None else timedelta(seconds=float(seconds))


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

