"""Approval deadlines: asking for a decision until a deadline, expiring what nobody answered,
waking snoozed incidents.

Who calls it: `IncidentStore.request_approval` (the agent, when it posts an incident that needs a
decision) and `IncidentStore.expire_due` (the leader's expiry loop), inside one transaction each.
Every change is a conditional transition (`agent.store.transitions`) with its timeline event, so an
expiry racing a decision has one winner.

Rules: an incident awaiting approval (or open with a deadline) whose `approval_deadline` is at or
before `now` becomes `expired`; a snoozed incident whose `snoozed_until` is at or before `now` awaits
approval again (its deadline was moved by the snooze: see `transitions`). An incident without a
deadline never expires by itself.

What it does not do: choose the deadline (the caller's settings do), post or update messages, or
read a clock.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, select

from agent.model.incident import TransitionResult
from agent.model.lifecycle import IncidentStatus
from agent.store.errors import InvalidRecordError
from agent.store.schema import IncidentRow
from agent.store.transitions import expire, transition

SNOOZE_END_ACTOR = "snooze-end"
"""Who the end of a snooze is recorded as (`status_by` and the timeline event's actor)."""

_EXPIRABLE = (IncidentStatus.OPEN, IncidentStatus.AWAITING_APPROVAL)


def check_deadline(incident_id: int, *, deadline: datetime, now: datetime) -> None:
    """Refuse an approval deadline that is not a timezone-aware time after `now`."""
    if deadline.tzinfo is None or deadline <= now:
        raise InvalidRecordError(
            f"incident {incident_id}: the approval deadline {deadline.isoformat()} must be a "
            f"timezone-aware time after {now.isoformat()}")


def request_approval(
    conn: Connection,
    incident_id: int,
    *,
    deadline: datetime,
    now: datetime,
    actor: str,
    token: str,
    attempt: int,
) -> TransitionResult:
    """`open -> awaiting_approval` with the deadline set, in one conditional UPDATE."""
    return transition(
        conn, incident_id, expected=IncidentStatus.OPEN, new=IncidentStatus.AWAITING_APPROVAL,
        actor=actor, now=now, token=token, attempt=attempt,
        detail={"approval_deadline": deadline.isoformat()},
        extra={"approval_deadline": deadline},
    )


def expire_due(conn: Connection, *, now: datetime, token: str, attempt: int) -> list[int]:
    """Expire every incident past its deadline and wake every snooze that ended; returns the ids
    this call moved (on a retried transaction, also those its first attempt moved before its
    answer was lost: every change carries `token`)."""
    overdue = conn.execute(
        select(IncidentRow.id, IncidentRow.status, IncidentRow.approval_deadline)
        .where(IncidentRow.status.in_([s.value for s in _EXPIRABLE]),
               IncidentRow.approval_deadline.is_not(None),
               IncidentRow.approval_deadline <= now)
        .order_by(IncidentRow.id)
    ).all()
    moved: set[int] = set()
    for row in overdue:
        if expire(conn, row.id, expected=IncidentStatus(row.status),
                  deadline=row.approval_deadline, now=now, token=token).applied:
            moved.add(row.id)
    woken = conn.execute(
        select(IncidentRow.id, IncidentRow.snoozed_until)
        .where(IncidentRow.status == IncidentStatus.SNOOZED.value,
               IncidentRow.snoozed_until.is_not(None),
               IncidentRow.snoozed_until <= now)
        .order_by(IncidentRow.id)
    ).all()
    for snoozed in woken:
        if transition(conn, snoozed.id, expected=IncidentStatus.SNOOZED,
                      new=IncidentStatus.AWAITING_APPROVAL, actor=SNOOZE_END_ACTOR, now=now,
                      token=token, attempt=1,
                      detail={"snoozed_until": snoozed.snoozed_until.isoformat()}).applied:
            moved.add(snoozed.id)
    if attempt > 1:  # rare: a scan for our token finds what a lost first attempt committed
        moved.update(conn.execute(
            select(IncidentRow.id).where(IncidentRow.status_token == token)
        ).scalars())
    return sorted(moved)
