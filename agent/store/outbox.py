"""The outbox: messages to deliver (Slack posts, updates, digests), kept until delivered or dead.

Who calls it: `IncidentStore.enqueue_message` (the agent and the chat layer queue messages in the
store, so a message survives a crash or a Slack outage), `IncidentStore.due_messages`,
`mark_delivered` and `mark_failed` (the leader's deliverer). Each function runs inside the caller's
transaction.

Rules: enqueue is idempotent by `dedupe_key`; a failed attempt is retried with exponential backoff
(`OutboxPolicy`) and after `max_attempts` the message is dead: kept, visible, reported, never
dropped silently. A delivered post adds a `posted` event to its incident's timeline.

What it does not do: talk to Slack, render a message, or read a clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, insert, select, update
from sqlalchemy.exc import IntegrityError

from agent.model.incident import OutboxMessage
from agent.model.lifecycle import EventKind, MessageKind, MessageStatus, retry_delay
from agent.store.errors import IncidentNotFoundError, MessageNotFoundError
from agent.store.rows import UnreadableError, message
from agent.store.schema import OutboxRow
from agent.store.timeline import insert_event


@dataclass(frozen=True)
class OutboxPolicy:
    """Delivery retries: exponential from `base` up to `cap`; after `max_attempts` a message is dead
    (kept, visible, reported), never silently dropped."""

    base: timedelta = timedelta(seconds=5)
    cap: timedelta = timedelta(minutes=15)
    max_attempts: int = 12
    lease: timedelta = timedelta(seconds=60)


def enqueue(
    conn: Connection,
    kind: MessageKind,
    *,
    payload: Mapping[str, Any],
    now: datetime,
    incident_id: int | None,
    channel: str | None,
    dedupe_key: str | None,
) -> int:
    """Insert a pending message; with a `dedupe_key` already queued, return that message's id."""
    if dedupe_key is not None:
        existing = _by_dedupe_key(conn, dedupe_key)
        if existing is not None:
            return existing
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
        # Either a concurrent enqueue with the same key won, or the incident does not exist.
        again = None if dedupe_key is None else _by_dedupe_key(conn, dedupe_key)
        if again is not None:
            return again
        if incident_id is not None:
            raise IncidentNotFoundError(incident_id) from None
        raise
    return message_id


def _by_dedupe_key(conn: Connection, dedupe_key: str) -> int | None:
    found = conn.execute(select(OutboxRow.id).where(OutboxRow.dedupe_key == dedupe_key)).scalar()
    return None if found is None else int(found)


def due(conn: Connection, *, now: datetime, limit: int, lease: timedelta) -> list[OutboxMessage]:
    """Claim up to `limit` pending messages whose next attempt is due, oldest first, by pushing
    `next_attempt_at` to `now + lease` with a conditional UPDATE (one claimer per message)."""
    lease_until = now + lease
    rows = conn.execute(
        select(OutboxRow)
        .where(OutboxRow.status == MessageStatus.PENDING.value, OutboxRow.next_attempt_at <= now)
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
                claimed.append(message(row))
            except UnreadableError as exc:
                # Unreadable: make it dead so it stops coming back, and say why.
                conn.execute(
                    update(OutboxRow).where(OutboxRow.id == row.id)
                    .values(status=MessageStatus.DEAD.value, last_error=str(exc))
                )
    return claimed


def mark_delivered(
    conn: Connection, message_id: int, *, now: datetime, external_ref: str | None
) -> None:
    """Mark the message delivered; a delivered post adds a `posted` event to its incident."""
    row = conn.execute(
        update(OutboxRow)
        .where(OutboxRow.id == message_id)
        .values(status=MessageStatus.DELIVERED.value, delivered_at=now,
                attempts=OutboxRow.attempts + 1, external_ref=external_ref, last_error=None)
        .returning(OutboxRow.incident_id, OutboxRow.kind, OutboxRow.channel)
    ).first()
    if row is None:
        raise MessageNotFoundError(message_id)
    if row.incident_id is not None and row.kind == MessageKind.POST.value:
        insert_event(conn, row.incident_id, kind=EventKind.POSTED, now=now, actor="outbox",
                     detail={"channel": row.channel, "ref": external_ref,
                             "message_id": message_id})


def mark_failed(
    conn: Connection, message_id: int, *, now: datetime, error: str, policy: OutboxPolicy
) -> OutboxMessage:
    """Count a failed attempt: schedule the next with backoff, or mark the message dead after
    `policy.max_attempts`. Raises `UnreadableError` when the stored message cannot be read."""
    attempts = conn.execute(
        select(OutboxRow.attempts).where(OutboxRow.id == message_id)
    ).scalar()
    if attempts is None:
        raise MessageNotFoundError(message_id)
    attempts += 1
    status = MessageStatus.DEAD if attempts >= policy.max_attempts else MessageStatus.PENDING
    delay = retry_delay(attempts, base=policy.base, cap=policy.cap)
    row = conn.execute(
        update(OutboxRow)
        .where(OutboxRow.id == message_id)
        .values(attempts=attempts, status=status.value, next_attempt_at=now + delay,
                last_error=error[:2000])
        .returning(*OutboxRow.__table__.c)
    ).one()
    return message(row)
