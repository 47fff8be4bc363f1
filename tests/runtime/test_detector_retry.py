"""A detector batch whose store writes fail is retried, not dropped: back into the debouncer after
a backoff (pure: `Debouncer.retry`), merged with the changes that arrive meanwhile, its first-seen
time kept; retried until handled. Any other error is a bug: the batch is dropped (the leader's
periodic resync covers it). Each batch's outcome is reported."""

from __future__ import annotations

import itertools
import threading
import time
from datetime import timedelta

import pytest

from agent.errors import UnavailableError
from agent.model.job import JobRef
from agent.model.workload import JobKind
from agent.runtime.detector import BatchOutcome, Debouncer, Detector
from agent.sources.change import Change


def job_change(i: int) -> Change:
    return Change(jobs=frozenset({JobRef(JobKind.PYTORCH, "ml", f"j{i}")}))


@pytest.mark.parametrize(
    ("arrivals", "check_at", "expect_jobs"),
    [
        ([], 4.9, None),  # the failed batch waits for its backoff (due at 5.0)
        ([], 5.0, {0}),
        ([2.0], 4.9, None),  # a change arriving meanwhile waits with it
        ([2.0], 5.0, {0, 2}),  # ... and is merged into the retried batch
        ([4.8], 5.0, {0, 4}),  # the retried batch's age, not the quiet window, decides (max delay)
    ],
)
def test_debouncer_retry(arrivals: list[float], check_at: float, expect_jobs: set[int] | None) -> None:
    d = Debouncer(delay=0.5, max_delay=2.0)
    d.add(job_change(0), 0.0)
    change, first = d.take(0.5) or (Change(), -1.0)
    assert first == 0.0
    d.retry(change, first, not_before=5.0)  # failed at 0.5; backoff until 5.0
    for t in arrivals:
        d.add(job_change(int(t)), t)
    batch = d.take(check_at)
    if expect_jobs is None:
        assert batch is None
        return
    assert batch is not None
    merged, first_seen = batch
    assert merged.jobs == frozenset(JobRef(JobKind.PYTORCH, "ml", f"j{i}") for i in expect_jobs)
    assert first_seen == 0.0
    assert d.take(check_at + 10) is None  # nothing left, and the backoff is over
    d.add(job_change(9), 20.0)
    assert d.due_at() == 20.5


def test_an_empty_retry_is_ignored() -> None:
    d = Debouncer(delay=0.5, max_delay=2.0)
    d.retry(Change(), 0.0, not_before=1.0)
    assert d.due_at() is None


def test_a_batch_is_retried_with_backoff_until_the_store_takes_it() -> None:
    calls: list[tuple[Change, float, float]] = []
    handled = threading.Event()
    failures = 3

    def handle(change: Change, first: float) -> None:
        calls.append((change, first, time.monotonic()))
        if len(calls) == 1:
            detector.submit(job_change(2))  # arrives while the first attempt fails
        if len(calls) <= failures:
            raise UnavailableError("database away")
        handled.set()

    outcomes: list[BatchOutcome] = []
    detector = Detector(
        debounce=0.01, max_delay=1.0, handle=handle, outcome=outcomes.append,
        retry_base=timedelta(milliseconds=50), retry_cap=timedelta(milliseconds=200),
    )
    detector.start()
    try:
        assert detector.submit(job_change(1))
        assert handled.wait(10)
    finally:
        detector.stop()
    assert len(calls) == failures + 1 and detector.retries == failures
    assert outcomes == [BatchOutcome.RETRIED] * failures + [BatchOutcome.OK]
    first_seen = calls[0][1]
    assert all(first == first_seen for _, first, _ in calls)  # the detection latency's start
    assert calls[0][0].jobs == job_change(1).jobs
    assert calls[-1][0].jobs == job_change(1).jobs | job_change(2).jobs  # merged with what came meanwhile
    gaps = [b[2] - a[2] for a, b in itertools.pairwise(calls)]
    assert gaps[0] >= 0.05 and gaps[1] >= 0.1 and gaps[2] >= 0.2  # 50 ms, doubling


def test_a_bug_drops_the_batch_instead_of_retrying_it() -> None:
    calls: list[Change] = []
    second = threading.Event()

    def handle(change: Change, first: float) -> None:
        calls.append(change)
        if len(calls) == 1:
            raise RuntimeError("a bug")
        second.set()

    outcomes: list[BatchOutcome] = []
    detector = Detector(debounce=0.01, max_delay=1.0, handle=handle, outcome=outcomes.append)
    detector.start()
    try:
        detector.submit(job_change(1))
        deadline = time.monotonic() + 30
        while not calls and time.monotonic() < deadline:
            time.sleep(0.01)
        detector.submit(job_change(2))
        assert second.wait(10)
    finally:
        detector.stop()
    assert [c.jobs for c in calls] == [job_change(1).jobs, job_change(2).jobs] and detector.retries == 0
    assert outcomes == [BatchOutcome.ERROR, BatchOutcome.OK]
