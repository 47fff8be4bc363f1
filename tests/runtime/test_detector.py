"""Debounced detection: a burst becomes one batch; quiet window and max delay (pure), and the
worker thread hands merged changes over once."""

from __future__ import annotations

import threading

import pytest

from agent.runtime.detector import Debouncer, Detector
from agent.sources.cache import Change
from agent.sources.jobkey import JobKey


def job(i: int) -> Change:
    return Change(jobs=frozenset({JobKey("PyTorchJob", "ml", f"j{i}")}))


@pytest.mark.parametrize(
    ("arrivals", "check_at", "expect_jobs"),
    [
        ([0.0], 0.49, None),  # still inside the quiet window
        ([0.0], 0.5, 1),
        ([0.0, 0.3, 0.6], 0.9, None),  # each arrival extends the window
        ([0.0, 0.3, 0.6], 1.1, 3),
        ([i * 0.4 for i in range(20)], 5.0, 13),  # max delay (5 s) caps a never-quiet stream
    ],
)
def test_debouncer(arrivals: list[float], check_at: float, expect_jobs: int | None) -> None:
    d = Debouncer(delay=0.5, max_delay=5.0)
    for i, t in enumerate(arrivals):
        if t <= check_at:
            d.add(job(i), t)
    batch = d.take(check_at)
    if expect_jobs is None:
        assert batch is None
    else:
        assert batch is not None
        change, first = batch
        assert len(change.jobs) == expect_jobs and first == 0.0


def test_empty_changes_are_ignored() -> None:
    d = Debouncer(delay=0.5, max_delay=5.0)
    d.add(Change(), 0.0)
    assert d.due_at() is None


class SteppedClock:
    """The detector's monotonic clock, advanced by the test."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_worker_turns_a_burst_into_one_batch() -> None:
    batches: list[tuple[Change, float]] = []
    done = threading.Event()

    def handle(change: Change, first: float) -> None:
        batches.append((change, first))
        done.set()

    clock = SteppedClock()
    detector = Detector(debounce=0.2, max_delay=5.0, handle=handle, monotonic=clock)
    detector.start()
    try:
        for i in range(64):  # a burst at t=0: nothing is due before t=0.2
            assert detector.submit(job(i % 4))
        assert not done.is_set()
        clock.now = 0.2  # the quiet window is over (the worker re-checks within 0.2 s)
        assert done.wait(10)
    finally:
        detector.stop()  # joins the worker: no batch can follow
    assert len(batches) == 1
    change, first = batches[0]
    assert len(change.jobs) == 4
    assert first == 0.0
    assert not detector.submit(job(1))


def test_a_failing_step_does_not_kill_the_worker() -> None:
    calls: list[Change] = []
    failed = threading.Event()
    second = threading.Event()

    def handle(change: Change, first: float) -> None:
        calls.append(change)
        if len(calls) == 1:
            failed.set()
            raise RuntimeError("store away")
        second.set()

    detector = Detector(debounce=0.01, max_delay=1.0, handle=handle)
    detector.start()
    try:
        detector.submit(job(1))
        assert failed.wait(10)
        detector.submit(job(2))
        assert second.wait(10)
    finally:
        detector.stop()
    assert len(calls) == 2
