"""The incident store's outbox operations: queue a message, claim due ones, mark them delivered or
failed (the SQL is `agent.store.outbox`'s; this runs each in one transaction).

A base of `agent.store.repository.IncidentStore`; called through it by the pipeline and the
playbooks (queueing) and the chat layer's deliverer (claiming, marking).

What it does not do: deliver anything (the deliverer does), or read a clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from agent.model.incident import ClaimedMessage, OutboxMessage
from agent.model.lifecycle import MessageKind
from agent.store import outbox
from agent.store.errors import InvalidRecordError, StoreError
from agent.store.rows import UnreadableError
from agent.store.transactions import StoreTransactions


class OutboxOperations(StoreTransactions):
    """The outbox half of the store's surface."""

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
