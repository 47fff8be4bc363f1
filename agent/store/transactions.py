"""How the incident store talks to its database: each operation one transaction, retried.

The base of `agent.store.repository.IncidentStore` (and of its `OutboxOperations` and
`HistoryReads`): it holds the engine, the read engine, the readiness flag and the `Retrier`, runs a
write body in one transaction on the engine (`_write`) and a read body on the read engine
(`_read`), each retried within the retry budget, and answers `ready`, `ping`,
`wait_until_reachable` and `close`.

What it does not do: know any table or operation (the store's other modules do), or read a clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, text

from agent.store.engine import read_engine
from agent.store.errors import StoreError, StoreUnavailableError, safe_url
from agent.store.outbox import OutboxPolicy
from agent.store.resilience import Readiness, Retrier, RetryPolicy

T = TypeVar("T")


class StoreTransactions:
    """One database behind a retrier: transactions for the store's operations."""

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
