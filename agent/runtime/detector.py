"""Event-driven detection: debounce cache changes, then re-diagnose only the affected jobs.

Called by the composition root: the cache's `on_change` and the Alertmanager receiver `submit`
`Change`s; one worker thread waits until the changes have been quiet for `debounce` (default
500 ms) or pending for `max_delay`, merges them, and calls `handle(change, first_seen)`, where
`first_seen` is the monotonic time of the earliest change in the batch (for the detection latency
metric). So a 64-pod job bound pod by pod produces one diagnosis. `Debouncer` is the pure part
(no clock: `now` is passed in). `stop()` lets the running step finish.

A change that completes a gang (`Change.gang_complete`: the last expected pod of a job was bound)
skips the window: it is due at once, as a batch of its own (the gang-complete changes that
arrived together), and what it diagnoses anyway (its jobs, the jobs of its namespaces) is taken
out of the changes still waiting. Everything else (relabels, policy churn, node events, pods of a
gang still binding) keeps the debounce, so a burst still costs one diagnosis. A failed batch's
backoff delays gang-complete changes too (the store is refusing writes either way).

A change submitted `at_once` (the start-up's and a new term's cluster-wide diagnosis: the sync is
done, there is nothing to wait for) makes everything pending due now, merged into one batch.

A batch whose handling raises `UnavailableError` (the incident store refused its writes, after the
store's own retries) is not dropped: it goes back into the debouncer, due after an exponential
backoff (`retry_base`, doubling, at most `retry_cap`), and changes arriving meanwhile merge into
it; so the retried batch covers both scopes, and its `first_seen` stays the earliest. Retried until
it is handled; the backoff restarts after a success. Handling is safe to repeat (the store dedupes
findings by fingerprint). Any other error is a bug: logged, and the batch dropped (the next
cluster-wide diagnosis covers it: the leader's periodic resync at the latest). `outcome` hears each
batch's `BatchOutcome`. What it does not do: diagnose or store (the `handle` callback glues the core
and the store), or schedule the resync.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from enum import StrEnum

from agent.errors import UnavailableError
from agent.model.lifecycle import retry_delay
from agent.sources.change import Change, merge_all

log = logging.getLogger(__name__)


class Debouncer:
    def __init__(self, *, delay: float, max_delay: float) -> None:
        self.delay = delay
        self.max_delay = max(delay, max_delay)
        self._pending: list[Change] = []
        self.first_at = 0.0
        self.last_at = 0.0
        self._urgent: list[Change] = []  # gang-complete changes: due at once
        self.urgent_at = 0.0
        self._not_before: float | None = None  # a failed batch waits for its backoff
        self._flush_at: float | None = None  # an `at_once` change: everything pending is due

    def add(self, change: Change, now: float, *, at_once: bool = False) -> None:
        if not change:
            return
        if at_once:
            if not self._pending:
                self.first_at = now
            self._pending.append(change)
            self.last_at = now
            self._flush_at = now if self._flush_at is None else self._flush_at
            return
        if change.gang_complete:
            if not self._urgent:
                self.urgent_at = now
            self._urgent.append(change)
            return
        if not self._pending:
            self.first_at = now
        self._pending.append(change)
        self.last_at = now

    def retry(self, change: Change, first_at: float, *, not_before: float) -> None:
        """Put a failed batch back: due at `not_before`, merged with whatever arrives meanwhile."""
        if not change:
            return
        if not self._pending:
            self.first_at = self.last_at = first_at
        else:
            self.first_at = min(self.first_at, first_at)
        self._pending.append(change)
        self._not_before = not_before

    def due_at(self) -> float | None:
        dues = []
        if self._urgent:
            dues.append(self.urgent_at)
        if self._pending:
            dues.append(min(self.last_at + self.delay, self.first_at + self.max_delay))
            if self._flush_at is not None:
                dues.append(self._flush_at)
        if not dues:
            return None
        due = min(dues)
        return due if self._not_before is None else max(due, self._not_before)

    def take(self, now: float) -> tuple[Change, float] | None:
        due = self.due_at()
        if due is None or now < due:
            return None
        self._not_before = None
        if self._urgent:
            urgent = merge_all(self._urgent)
            batch = (urgent, self.urgent_at)
            self._urgent = []
            self._pending = [r for r in (c.without(urgent) for c in self._pending) if r]
            return batch
        batch = (merge_all(self._pending), self.first_at)
        self._pending = []
        self._flush_at = None
        return batch


class BatchOutcome(StrEnum):
    OK = "ok"
    RETRIED = "retried"  # the store refused its writes: put back with backoff
    ERROR = "error"  # an unexpected error: logged, the batch dropped


class Detector:
    def __init__(
        self,
        *,
        debounce: float,
        max_delay: float,
        handle: Callable[[Change, float], None],
        monotonic: Callable[[], float] = time.monotonic,
        retry_base: timedelta = timedelta(seconds=1),
        retry_cap: timedelta = timedelta(seconds=10),
        outcome: Callable[[BatchOutcome], None] = lambda _: None,
    ) -> None:
        self.handle = handle
        self.outcome = outcome
        self.monotonic = monotonic
        self.retry_base = retry_base
        self.retry_cap = retry_cap
        self._debouncer = Debouncer(delay=debounce, max_delay=max_delay)
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.batches = 0
        self.retries = 0  # batches put back after their store writes failed
        self._failures = 0  # consecutive failed batches (for the backoff)

    def submit(self, change: Change, *, at_once: bool = False) -> bool:
        """Queue a change (`at_once`: due now, with everything pending); False once the detector
        is stopping (the caller may retry elsewhere)."""
        with self._cond:
            if self._stopping:
                return False
            self._debouncer.add(change, self.monotonic(), at_once=at_once)
            self._cond.notify()
        return True

    def run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stopping:
                        return
                    now = self.monotonic()
                    batch = self._debouncer.take(now)
                    if batch is not None:
                        break
                    due = self._debouncer.due_at()
                    self._cond.wait(None if due is None else max(0.0, due - now))
            change, first_seen = batch
            self.batches += 1
            try:
                self.handle(change, first_seen)
            except UnavailableError as exc:
                self._put_back(change, first_seen, exc)
                self.outcome(BatchOutcome.RETRIED)
                continue
            except Exception:  # top-level loop: log it, keep detecting
                log.exception("detection step failed; the batch is left to the next cluster-wide "
                              "diagnosis", extra={"reasons": list(change.reasons[:5])})
                self.outcome(BatchOutcome.ERROR)
            else:
                self.outcome(BatchOutcome.OK)
            self._failures = 0

    def _put_back(self, change: Change, first_seen: float, error: UnavailableError) -> None:
        self._failures += 1
        self.retries += 1
        delay = retry_delay(self._failures, base=self.retry_base, cap=self.retry_cap).total_seconds()
        log.warning(
            "detection batch not recorded, retrying in %.1fs: %s",
            delay,
            error,
            extra={"reasons": list(change.reasons[:5]), "attempts": self._failures},
        )
        with self._cond:
            self._debouncer.retry(change, first_seen, not_before=self.monotonic() + delay)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="detector", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stop after the running step (pending, not yet due changes and a batch waiting for its
        retry are dropped: the next start-up's full diagnosis covers them)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
