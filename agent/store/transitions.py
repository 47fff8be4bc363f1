"""Lifecycle transitions and decisions as conditional UPDATEs: one winner, losers told who won.

Who calls it: `IncidentStore.transition` and `IncidentStore.record_decision` (the agent, the
decision function of the CLI, HTTP API and chat layer), inside one transaction each.

A transition is `UPDATE incidents SET status=new ... WHERE id=:id AND status=:expected` in the same
transaction as its timeline event (and, for a decision, its decision row): exactly one concurrent
caller sees the updated row. A loser reads the current status, who set it and the latest decision.
Every status change writes a fresh random `status_token`, so a retried transaction whose first
COMMIT succeeded (but whose answer was lost) recognises its own win.

Approval deadline: a decision applies only before the incident's `approval_deadline` (when it has
one); a decision that comes later expires the incident in the same transaction and is told so. A
snooze pauses the approval clock: the deadline moves later by the snooze's length.

What it does not do: check that a transition is allowed (the facade calls
`agent.model.lifecycle.check_transition` before any I/O), decide when to transition, or read a clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, func, insert, or_, select, update

from agent.model.incident import Actor, Decision, TransitionResult
from agent.model.lifecycle import (
    DECISION_STATUS,
    DecisionOutcome,
    IncidentStatus,
    event_for_status,
    is_terminal,
)
from agent.store.errors import CorruptRecordError, IncidentNotFoundError
from agent.store.rows import UnreadableError, decision, enum
from agent.store.schema import DecisionRow, IncidentRow
from agent.store.timeline import insert_event

EXPIRY_ACTOR = "approval-deadline"
"""Who an expiry is recorded as (`status_by` and the timeline event's actor)."""


def transition(
    conn: Connection,
    incident_id: int,
    *,
    expected: IncidentStatus,
    new: IncidentStatus,
    actor: str,
    now: datetime,
    token: str,
    attempt: int,
    detail: Mapping[str, Any],
    extra: Mapping[str, Any] | None = None,
) -> TransitionResult:
    """Move `expected -> new` if the incident is still in `expected`, with its timeline event;
    `extra` are further column values written by the same UPDATE."""
    won = conditional_update(conn, incident_id, expected=expected, new=new, actor=actor,
                             token=token, now=now, extra=extra)
    if won is None:
        return lost(conn, incident_id, new=new, token=token, attempt=attempt, expected=expected)
    insert_event(conn, incident_id, kind=event_for_status(new), now=now, actor=actor,
                 detail=detail)
    return TransitionResult(incident_id, True, new, actor, previous=expected)


def record_decision(
    conn: Connection,
    incident_id: int,
    outcome: DecisionOutcome,
    *,
    actor: Actor,
    now: datetime,
    comment: str | None,
    expected: IncidentStatus,
    snoozed_until: datetime | None,
    token: str,
    attempt: int,
) -> TransitionResult:
    """Apply a decision as one conditional transition plus its audit row and timeline event."""
    new = DECISION_STATUS[outcome]
    extra: dict[str, Any] = {"decided_at": func.coalesce(IncidentRow.decided_at, now)}
    if outcome is DecisionOutcome.SNOOZE:
        extra["snoozed_until"] = snoozed_until
    won = conditional_update(conn, incident_id, expected=expected, new=new, actor=actor.label,
                             token=token, now=now, extra=extra, before_deadline=True)
    if won is None:
        expired = _expire_if_late(conn, incident_id, expected=expected, now=now, token=token)
        return expired or lost(conn, incident_id, new=new, token=token, attempt=attempt,
                               expected=expected)
    decision_id = conn.execute(
        insert(DecisionRow)
        .values(
            incident_id=incident_id,
            **won._mapping,  # the job's identity, copied: the audit outlives the incident
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
        moved = _pause_deadline(conn, incident_id, by=snoozed_until - now)
        if moved is not None:
            detail["approval_deadline"] = moved.isoformat()
    insert_event(conn, incident_id, kind=event_for_status(new), now=now, actor=actor.label,
                 detail=detail)
    recorded = Decision(
        id=decision_id, incident_id=incident_id, outcome=outcome, actor_id=actor.id,
        actor_name=actor.name, source=actor.source, decided_at=now, comment=comment,
        job=f"{won.job_namespace}/{won.job_name}",
    )
    return TransitionResult(incident_id, True, new, actor.label, previous=expected,
                            decision=recorded)


def conditional_update(
    conn: Connection,
    incident_id: int,
    *,
    expected: IncidentStatus,
    new: IncidentStatus,
    actor: str,
    token: str,
    now: datetime,
    extra: Mapping[str, Any] | None = None,
    before_deadline: bool = False,
) -> Any:
    """The one conditional UPDATE; returns the job's identity row (cluster, job_namespace,
    job_name, verdict: the columns a decision row copies) when it applied, else None. With
    `before_deadline`, it applies only while the approval deadline (if any) is after `now`."""
    values: dict[str, Any] = {
        "status": new.value,
        "status_by": actor,
        "status_token": token,
        "updated_at": now,
        **(extra or {}),
    }
    if is_terminal(new):
        values["closed_at"] = now
    conditions = [IncidentRow.id == incident_id, IncidentRow.status == expected.value]
    if before_deadline:
        conditions.append(or_(IncidentRow.approval_deadline.is_(None),
                              IncidentRow.approval_deadline > now))
    return conn.execute(
        update(IncidentRow)
        .where(*conditions)
        .values(**values)
        .returning(
            IncidentRow.cluster, IncidentRow.job_namespace, IncidentRow.job_name,
            IncidentRow.verdict,
        )
    ).first()


def lost(
    conn: Connection,
    incident_id: int,
    *,
    new: IncidentStatus,
    token: str,
    attempt: int,
    expected: IncidentStatus,
) -> TransitionResult:
    """The answer for a caller whose conditional UPDATE matched no row: the current status, who
    set it and the latest decision (or, on a retry that finds its own token, its own win)."""
    row = conn.execute(
        select(IncidentRow.status, IncidentRow.status_by, IncidentRow.status_token).where(
            IncidentRow.id == incident_id
        )
    ).first()
    if row is None:
        raise IncidentNotFoundError(incident_id)
    try:
        status = enum(IncidentStatus, row.status, column="status")
    except UnreadableError as exc:
        raise CorruptRecordError(incident_id, str(exc)) from None
    latest = _latest_decision(conn, incident_id)
    # A retry after a COMMIT whose answer was lost: the row carries our own token.
    applied = attempt > 1 and row.status_token == token and status is new
    return TransitionResult(
        incident_id, applied, status, row.status_by,
        previous=expected if applied else None, decision=latest,
    )


def _expire_if_late(
    conn: Connection, incident_id: int, *, expected: IncidentStatus, now: datetime, token: str
) -> TransitionResult | None:
    """A decision that came after the approval deadline: expire the incident now (what the expiry
    loop would do) and answer that it expired; None when the deadline is not why it lost."""
    row = conn.execute(
        select(IncidentRow.status, IncidentRow.approval_deadline)
        .where(IncidentRow.id == incident_id)
    ).first()
    if (row is None or row.status != expected.value or row.approval_deadline is None
            or row.approval_deadline > now):
        return None
    result = expire(conn, incident_id, expected=expected, deadline=row.approval_deadline,
                    now=now, token=token)
    if not result.applied:  # another writer moved it meanwhile: `lost` reports who
        return None
    return TransitionResult(incident_id, False, IncidentStatus.EXPIRED, EXPIRY_ACTOR,
                            decision=_latest_decision(conn, incident_id))


def expire(
    conn: Connection,
    incident_id: int,
    *,
    expected: IncidentStatus,
    deadline: datetime,
    now: datetime,
    token: str,
) -> TransitionResult:
    """`expected -> expired` because the approval deadline passed (actor `EXPIRY_ACTOR`)."""
    return transition(conn, incident_id, expected=expected, new=IncidentStatus.EXPIRED,
                      actor=EXPIRY_ACTOR, now=now, token=token, attempt=1,
                      detail={"approval_deadline": deadline.isoformat()})


def _pause_deadline(conn: Connection, incident_id: int, *, by: timedelta) -> datetime | None:
    """Move the approval deadline (if any) later by the snooze's length: the time left to decide
    when the snooze began is left again when it ends. Returns the new deadline."""
    deadline = conn.execute(
        select(IncidentRow.approval_deadline).where(IncidentRow.id == incident_id)
    ).scalar()
    if deadline is None:
        return None
    moved: datetime = deadline + by
    conn.execute(
        update(IncidentRow).where(IncidentRow.id == incident_id).values(approval_deadline=moved)
    )
    return moved


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
        return decision(row)
    except UnreadableError as exc:
        raise CorruptRecordError(incident_id, str(exc)) from None
