"""The outbox: messages to deliver (Slack posts, updates, digests), kept until delivered or dead.

Who calls it: `IncidentStore.enqueue_message` (the agent and the chat layer queue messages in the
store, so a message survives a crash or a Slack outage), `IncidentStore.claim_messages`,
`mark_delivered` and `mark_failed` (the leader's deliverer). Each function runs inside the caller's
transaction.

Rules: enqueue is idempotent by `dedupe_key`. A deliverer claims due messages (a random token and a
lease); only the holder of the token marks a message delivered or failed, and only while it is
pending, so an expired claim taken over by another deliverer can never post twice or revive a dead
message. A message waits while an earlier message of its incident is pending (order per incident).
A failed attempt releases the claim and is retried with exponential backoff (`OutboxPolicy`); after
`max_attempts` the message is dead: kept, visible, reported, never dropped silently. A delivered
post adds a `posted` event to its incident's timeline.

What it does not do: talk to Slack, render a message, or read a clock.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, and_, exists, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import aliased

from agent.model.incident import ClaimedMessage, OutboxMessage
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
                .values(**message_values(kind, payload=payload, now=now, incident_id=incident_id,
                                         channel=channel, dedupe_key=dedupe_key))
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


def message_values(
    kind: MessageKind,
    *,
    payload: Mapping[str, Any],
    now: datetime,
    incident_id: int | None,
    channel: str | None,
    dedupe_key: str | None,
) -> dict[str, Any]:
    """The columns of a newly queued message (one row, or one of a multi-row insert)."""
    return {"incident_id": incident_id, "kind": kind.value, "channel": channel,
            "payload": dict(payload), "dedupe_key": dedupe_key,
            "status": MessageStatus.PENDING.value, "attempts": 0, "next_attempt_at": now,
            "created_at": now}


def _by_dedupe_key(conn: Connection, dedupe_key: str) -> int | None:
    found = conn.execute(select(OutboxRow.id).where(OutboxRow.dedupe_key == dedupe_key)).scalar()
    return None if found is None else int(found)


def claim(
    conn: Connection, *, now: datetime, limit: int, lease: timedelta
) -> list[ClaimedMessage]:
    """Claim up to `limit` due messages, oldest first, each with a fresh token until `now + lease`.

    Due: pending, next attempt at or before `now`, not held by a live claim (never claimed, released
    by `mark_failed`, or expired), and no earlier message of the same incident still pending (order
    per incident). Each claim is a conditional UPDATE repeating the first three conditions, so of
    two concurrent claimers exactly one takes a message; the order condition needs no repeat, as
    an earlier message can stop being pending but never become pending again."""
    until = now + lease
    earlier = aliased(OutboxRow)
    waits = exists().where(earlier.incident_id == OutboxRow.incident_id,
                           earlier.id < OutboxRow.id,
                           earlier.status == MessageStatus.PENDING.value)
    rows = conn.execute(
        select(OutboxRow)
        .where(_claimable(now), ~waits)
        .order_by(OutboxRow.next_attempt_at, OutboxRow.id)
        .limit(limit)
    ).all()
    claimed: list[ClaimedMessage] = []
    for row in rows:
        token = str(uuid.uuid4())
        taken = conn.execute(
            update(OutboxRow)
            .where(OutboxRow.id == row.id, _claimable(now))
            .values(claim_token=token, claimed_until=until)
        )
        if taken.rowcount != 1:
            continue
        try:
            claimed.append(ClaimedMessage(message(row), token, until))
        except UnreadableError as exc:
            # Unreadable: make it dead so it stops coming back, and say why.
            conn.execute(
                update(OutboxRow).where(OutboxRow.id == row.id)
                .values(status=MessageStatus.DEAD.value, last_error=str(exc))
            )
    return claimed


def _claimable(now: datetime) -> Any:
    return and_(
        OutboxRow.status == MessageStatus.PENDING.value,
        OutboxRow.next_attempt_at <= now,
        or_(OutboxRow.claimed_until.is_(None), OutboxRow.claimed_until <= now),
    )


def _held(message_id: int, token: str) -> Any:
    """The message still carries this live-or-expired (not released) claim and is pending."""
    return and_(
        OutboxRow.id == message_id,
        OutboxRow.claim_token == token,
        OutboxRow.claimed_until.is_not(None),
        OutboxRow.status == MessageStatus.PENDING.value,
    )


def _current(conn: Connection, message_id: int) -> Any:
    row = conn.execute(select(OutboxRow).where(OutboxRow.id == message_id)).first()
    if row is None:
        raise MessageNotFoundError(message_id)
    return row


def mark_delivered(
    conn: Connection,
    message_id: int,
    *,
    token: str,
    now: datetime,
    external_ref: str | None,
    attempt: int,
) -> bool:
    """Mark the message delivered if the claim `token` still holds it; a delivered post adds a
    `posted` event to its incident. Returns whether it applied (on a retried transaction, also
    True when the lost first attempt applied it)."""
    row = conn.execute(
        update(OutboxRow)
        .where(_held(message_id, token))
        .values(status=MessageStatus.DELIVERED.value, delivered_at=now, claimed_until=None,
                attempts=OutboxRow.attempts + 1, external_ref=external_ref, last_error=None)
        .returning(OutboxRow.incident_id, OutboxRow.kind, OutboxRow.channel)
    ).first()
    if row is None:
        current = _current(conn, message_id)
        return (attempt > 1 and current.claim_token == token
                and current.status == MessageStatus.DELIVERED.value)
    if row.incident_id is not None and row.kind == MessageKind.POST.value:
        insert_event(conn, row.incident_id, kind=EventKind.POSTED, now=now, actor="outbox",
                     detail={"channel": row.channel, "ref": external_ref,
                             "message_id": message_id})
    return True


def mark_failed(
    conn: Connection,
    message_id: int,
    *,
    token: str,
    now: datetime,
    error: str,
    policy: OutboxPolicy,
    attempt: int,
) -> OutboxMessage | None:
    """Count a failed attempt if the claim `token` still holds the message: release the claim and
    schedule the next attempt with backoff, or mark the message dead after `policy.max_attempts`.
    Returns the message as it now stands, or None when the claim no longer held it (nothing
    changed). Raises `UnreadableError` when the stored message cannot be read."""
    current = _current(conn, message_id)
    if attempt > 1 and current.claim_token == token and current.claimed_until is None:
        return message(current)  # the lost first attempt released it already
    attempts = current.attempts + 1
    status = MessageStatus.DEAD if attempts >= policy.max_attempts else MessageStatus.PENDING
    delay = retry_delay(attempts, base=policy.base, cap=policy.cap)
    row = conn.execute(
        update(OutboxRow)
        .where(_held(message_id, token), OutboxRow.attempts == current.attempts)
        .values(attempts=attempts, status=status.value, next_attempt_at=now + delay,
                last_error=error[:2000], claimed_until=None)
        .returning(*OutboxRow.__table__.c)
    ).first()
    return None if row is None else message(row)
