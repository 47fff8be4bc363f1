"""Retries with backoff for database work, the readiness flag, and deadlines for request paths.

Who uses it: `agent.store.repository` wraps every operation in `Retrier.call`; `agent.store.migrate`
uses it to wait for a database that is unreachable at start. The runtime reads `Readiness.is_ready`
(or the store's `ready()`), which never touches the database itself, and runs the store calls of a
request (the Alertmanager webhook, the readiness probe) inside `deadline(...)`.

Behaviour: a transient error (connection refused, reset, server gone, pool timeout) marks the store
not ready and is retried with exponential backoff (base 0.1 s, doubling, at most 5 s) until the
budget (`database.write_retry`, or `start_timeout` at start) is spent; then `StoreUnavailableError` is
raised naming the database and the last reason, so no write is ever dropped silently: it either
happened or the caller gets an error. A success marks the store ready. Non-transient errors (a bug,
a constraint, a permission) are not retried, do not change readiness, and become a `StoreError`
naming the database and the operation.

A `deadline(budget)` block bounds every store operation run inside it on this thread (or task):
the retry budget shrinks to what is left of the block's, and the engine bounds each attempt too
(SQLite's busy timeout, PostgreSQL's statement timeout; see `agent.store.engine`), so a caller that
must answer promptly gets `StoreUnavailableError` within about `budget` instead of waiting out
`database.write_retry` and the lock timeouts.

What it does not do: make an operation idempotent. Operations retried after an unknown outcome
(the connection died during COMMIT) must tolerate being run twice; the repository's are designed so
(conditional transitions recognise their own earlier win, record_finding dedupes by fingerprint).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from sqlalchemy import exc as sa_exc

from agent.model.lifecycle import retry_delay
from agent.store.errors import StoreError, StoreUnavailableError, describe, is_transient

log = logging.getLogger(__name__)
T = TypeVar("T")

# the monotonic time (time.monotonic) by which the current `deadline` block must be done
_DEADLINE: ContextVar[float | None] = ContextVar("zonemedic_store_deadline", default=None)


@contextmanager
def deadline(budget: timedelta) -> Iterator[None]:
    """Bound the store operations run inside the block to `budget` in all (an inner block can only
    shorten an outer one)."""
    end = time.monotonic() + max(0.0, budget.total_seconds())
    outer = _DEADLINE.get()
    token = _DEADLINE.set(end if outer is None else min(outer, end))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def time_left() -> float | None:
    """Seconds left in the current `deadline` block (0 when spent); None outside any block."""
    end = _DEADLINE.get()
    return None if end is None else max(0.0, end - time.monotonic())


class Readiness:
    """A thread-safe flag: was the last database contact a success?"""

    def __init__(self, ready: bool = False) -> None:
        self._ready = ready
        self._reason = "not connected yet" if not ready else ""
        self._lock = threading.Lock()

    def is_ready(self) -> bool:
        with self._lock:
            return self._ready

    @property
    def reason(self) -> str:
        """Why the store is not ready ('' when it is)."""
        with self._lock:
            return self._reason

    def mark_ready(self) -> None:
        with self._lock:
            self._ready, self._reason = True, ""

    def mark_unready(self, reason: str) -> None:
        with self._lock:
            self._ready, self._reason = False, reason


@dataclass(frozen=True)
class RetryPolicy:
    budget: timedelta = timedelta(seconds=30)
    base: timedelta = timedelta(milliseconds=100)
    cap: timedelta = timedelta(seconds=5)


class Retrier:
    """Runs a database operation, retrying transient failures within the policy's budget."""

    def __init__(
        self,
        *,
        target: str,
        policy: RetryPolicy,
        readiness: Readiness,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.target = target
        self.policy = policy
        self.readiness = readiness
        self._sleep = sleep
        self._monotonic = monotonic

    def call(
        self,
        operation: Callable[[int], T],
        *,
        what: str,
        budget: timedelta | None = None,
    ) -> T:
        """Run `operation(attempt)` (attempt counts from 1) until it succeeds or the budget ends."""
        limit = (budget if budget is not None else self.policy.budget).total_seconds()
        left = time_left()
        if left is not None:
            limit = min(limit, left)
        started = self._monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                result = operation(attempt)
            except sa_exc.SQLAlchemyError as exc:
                if not is_transient(exc):
                    # A bug, a constraint or a permission: not worth retrying; named, no traceback.
                    raise StoreError(
                        f"database {self.target}: {what} failed: {describe(exc)}"
                    ) from exc
                reason = describe(exc)
                self.readiness.mark_unready(reason)
                delay = retry_delay(attempt, base=self.policy.base, cap=self.policy.cap)
                elapsed = self._monotonic() - started
                if elapsed + delay.total_seconds() > limit:
                    raise StoreUnavailableError(
                        f"database {self.target} unavailable: {what} failed after {attempt} "
                        f"attempt(s) over {elapsed:.1f}s: {reason}"
                    ) from None
                log.warning(
                    "database %s unavailable (%s), retrying %s in %.1fs (attempt %d)",
                    self.target, reason, what, delay.total_seconds(), attempt,
                )
                self._sleep(delay.total_seconds())
                continue
            self.readiness.mark_ready()
            return result
