"""The graceful-deletion timer of the twin's store: pods removed when their grace period ends.

A pod deleted while bound to a node gets a deletionTimestamp and stays (Terminating) for its grace
period; `GraceTimer` keeps the uids waiting for their deadline (`pending`) in a heap and runs one
daemon thread that calls back when a deadline passes by the store's clock. A test with a fake clock
calls the store's `expire_due` after advancing time instead of waiting for the thread.

Used by the store's deletion module (deletion.py). It does not remove anything itself.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable


class GraceTimer:
    """Deadlines of pods in graceful deletion; methods expect the store's lock to be held,
    except `run`, which is the thread body."""

    def __init__(
        self,
        lock: threading.RLock,
        *,
        clock: Callable[[], float],
        expire: Callable[[], int],
    ) -> None:
        self._clock = clock
        self._expire = expire
        self.pending: set[str] = set()  # uids waiting for their grace timer
        self._heap: list[tuple[float, int, str]] = []
        self._seq = 0
        self._cond = threading.Condition(lock)
        self._thread: threading.Thread | None = None
        self._closed = False

    def schedule(self, uid: str, deadline: float) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (deadline, self._seq, uid))
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self.run, name="twin-store-grace", daemon=True)
            self._thread.start()
        self._cond.notify_all()

    def pop_due(self, now: float) -> list[str]:
        """The uids whose deadline is at or before `now`, in deadline order (removed from the heap;
        a uid may appear that is no longer pending)."""
        due = []
        while self._heap and self._heap[0][0] <= now:
            due.append(heapq.heappop(self._heap)[2])
        return due

    def run(self) -> None:
        with self._cond:
            while not self._closed:
                if not self._heap:
                    self._cond.wait()
                    continue
                wait = self._heap[0][0] - self._clock()
                if wait > 0:
                    self._cond.wait(timeout=min(wait, 0.25))
                    continue
                self._expire()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
