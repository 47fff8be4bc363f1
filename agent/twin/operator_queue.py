"""A keyed work queue with one worker thread: how every twin controller reacts to events.

Used by the scheduler, the operators, the kubelet and the training runtime. Watch callbacks call
`add(key)` (deduplicated while queued) or `add_after(key, model_seconds)`; the worker thread calls
`reconcile(key)`, which may return a delay in model seconds to run again. The thread sleeps on a
condition until the next key is due, so an idle twin burns no CPU (no polling). Errors from a
reconcile are logged and retried with back-off; the queue never dies of one bad key. It does not
know what the keys mean.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections import deque
from collections.abc import Callable, Hashable

from agent.twin.clock import TwinClock

log = logging.getLogger(__name__)

Reconcile = Callable[[Hashable], "float | None"]
RETRY_BASE_SECONDS = 0.05
RETRY_MAX_SECONDS = 5.0


class WorkQueue:
    def __init__(self, name: str, reconcile: Reconcile, *, clock: TwinClock) -> None:
        self.name = name
        self._reconcile = reconcile
        self._clock = clock
        self._cond = threading.Condition()
        self._ready: deque[Hashable] = deque()
        self._queued: set[Hashable] = set()
        self._delayed: list[tuple[float, int, Hashable]] = []  # (due in model time, seq, key)
        self._seq = itertools.count()
        self._failures: dict[Hashable, int] = {}
        self._busy = False
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=f"twin-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)

    def add(self, key: Hashable) -> None:
        with self._cond:
            if key not in self._queued:
                self._queued.add(key)
                self._ready.append(key)
                self._cond.notify()

    def add_after(self, key: Hashable, model_seconds: float) -> None:
        if model_seconds <= 0:
            self.add(key)
            return
        with self._cond:
            due = self._clock.now() + model_seconds
            heapq.heappush(self._delayed, (due, next(self._seq), key))
            self._cond.notify()

    def idle(self) -> bool:
        """Nothing ready and nothing running (delayed keys may still be pending)."""
        with self._cond:
            return not self._ready and not self._busy

    def _next(self) -> Hashable | None:
        with self._cond:
            while not self._stopped:
                now = self._clock.now()
                while self._delayed and self._delayed[0][0] <= now:
                    _, _, key = heapq.heappop(self._delayed)
                    if key not in self._queued:
                        self._queued.add(key)
                        self._ready.append(key)
                if self._ready:
                    key = self._ready.popleft()
                    self._queued.discard(key)
                    self._busy = True
                    return key
                timeout = self._clock.wall(self._delayed[0][0] - now) if self._delayed else None
                self._cond.wait(timeout=timeout)
            return None

    def _run(self) -> None:
        while True:
            key = self._next()
            if key is None:
                return
            again: float | None = None
            try:
                again = self._reconcile(key)
                self._failures.pop(key, None)
            except Exception:  # top-level loop of a controller: log, back off, retry
                failures = self._failures.get(key, 0) + 1
                self._failures[key] = failures
                log.exception(
                    "twin %s: reconcile of %r failed (attempt %d)", self.name, key, failures
                )
                again = min(RETRY_MAX_SECONDS, RETRY_BASE_SECONDS * 2**failures) * self._clock.speed
            finally:
                with self._cond:
                    self._busy = False
            if again is not None:
                self.add_after(key, again)
