"""Debounced detection: a burst becomes one batch; quiet window and max delay (pure), and the
worker thread hands merged changes over once."""

from __future__ import annotations

import threading

import pytest

from agent.model.job import JobRef
from agent.model.workload import JobKind
from agent.runtime.detector import Debouncer, Detector
from agent.sources.change import Change


def job_change(i: int) -> Change:
    return Change(jobs=frozenset({JobRef(JobKind.PYTORCH, "ml", f"j{i}")}))


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
            d.add(job_change(i), t)
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
            assert detector.submit(job_change(i % 4))
        assert not done.is_set()
        clock.now = 0.2  # the quiet window is over (the worker re-checks within 0.2 s)
        assert done.wait(10)
    finally:
        detector.stop()  # joins the worker: no batch can follow
    assert len(batches) == 1
    change, first = batches[0]
    assert len(change.jobs) == 4
    assert first == 0.0
    assert not detector.submit(job_change(1))


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
        detector.submit(job_change(1))
        assert failed.wait(10)
        detector.submit(job_change(2))
        assert second.wait(10)
    finally:
        detector.stop()
    assert len(calls) == 2


def gang(i: int) -> Change:
    return Change(jobs=frozenset({JobRef(JobKind.PYTORCH, "ml", f"j{i}")}), gang_complete=True)


def relabel_in(namespace: str) -> Change:
    return Change(namespaces=frozenset({namespace}))


@pytest.mark.parametrize(
    ("arrivals", "check_at", "expect_jobs", "expect_namespaces", "left_due"),
    [
        # a gang-complete change alone: due when it arrives, not after the window
        ([(0.0, gang(1))], 0.0, {"j1"}, set(), None),
        # it does not wait for a relabel of another job that arrived before it
        ([(0.0, job_change(2)), (0.1, gang(1))], 0.1, {"j1"}, set(), 0.5),
        # a relabel of the same job waiting in the window is covered by the gang's diagnosis
        ([(0.0, job_change(1)), (0.1, gang(1))], 0.1, {"j1"}, set(), None),
        # namespace-scoped changes stay unless the gang batch covers that namespace
        ([(0.0, relabel_in("web")), (0.2, gang(1))], 0.2, {"j1"}, set(), 0.5),
        # two gangs completing together form one batch
        ([(0.0, gang(1)), (0.0, gang(2))], 0.0, {"j1", "j2"}, set(), None),
    ],
)
def test_gang_complete_skips_the_window(
    arrivals: list[tuple[float, Change]],
    check_at: float,
    expect_jobs: set[str],
    expect_namespaces: set[str],
    left_due: float | None,
) -> None:
    d = Debouncer(delay=0.5, max_delay=5.0)
    for t, change in arrivals:
        d.add(change, t)
    batch = d.take(check_at)
    assert batch is not None
    change, first = batch
    assert {j.name for j in change.jobs} == expect_jobs
    assert set(change.namespaces) == expect_namespaces
    assert first == check_at
    assert d.due_at() == left_due


def test_a_relabel_alone_still_waits_for_the_window() -> None:
    d = Debouncer(delay=0.5, max_delay=5.0)
    d.add(job_change(1), 0.0)
    assert d.take(0.0) is None and d.take(0.49) is None
    assert d.take(0.5) is not None


def test_a_failed_batch_backoff_delays_a_gang_too() -> None:
    d = Debouncer(delay=0.5, max_delay=5.0)
    d.retry(job_change(3), 0.0, not_before=2.0)
    d.add(gang(1), 1.0)
    assert d.take(1.0) is None
    batch = d.take(2.0)
    assert batch is not None and {j.name for j in batch[0].jobs} == {"j1"}


def test_worker_hands_a_gang_over_at_once_while_a_relabel_waits() -> None:
    batches: list[tuple[Change, float]] = []
    arrived = threading.Condition()

    def handle(change: Change, first: float) -> None:
        with arrived:
            batches.append((change, first))
            arrived.notify_all()

    clock = SteppedClock()  # never advanced until the gang's batch is in: no window can pass
    detector = Detector(debounce=0.5, max_delay=5.0, handle=handle, monotonic=clock)
    detector.start()
    try:
        assert detector.submit(job_change(2))  # a relabel of another job
        assert detector.submit(gang(1))
        with arrived:
            assert arrived.wait_for(lambda: len(batches) == 1, timeout=30)
        assert {j.name for j in batches[0][0].jobs} == {"j1"}
        assert batches[0][1] == 0.0
        clock.now = 0.5  # the relabel's window is over
        with arrived:
            assert arrived.wait_for(lambda: len(batches) == 2, timeout=30)
    finally:
        detector.stop()
    assert {j.name for j in batches[1][0].jobs} == {"j2"}


@pytest.mark.parametrize("backoff", [False, True], ids=["due", "after a failed batch"])
def test_a_change_at_once_takes_everything_pending_with_it(backoff: bool) -> None:
    d = Debouncer(delay=0.5, max_delay=5.0)
    d.add(job_change(1), 0.0)
    d.add(job_change(2), 0.3)
    if backoff:  # a failed batch's backoff still holds: the store is refusing writes either way
        d.retry(job_change(3), 0.0, not_before=2.0)
    d.add(Change(everything=True, reasons=("start-up",)), 0.4, at_once=True)
    if backoff:
        assert d.take(1.9) is None
    batch = d.take(2.0 if backoff else 0.4)  # not 0.5 s after the last change: at once
    assert batch is not None
    change, first = batch
    assert change.everything and first == 0.0 and "start-up" in change.reasons
    assert len(change.jobs) == (3 if backoff else 2)
    assert d.take(10.0) is None  # one batch: nothing left, nothing due
    d.add(job_change(4), 11.0)  # and later changes wait for the window again
    assert d.take(11.2) is None and d.take(11.5) is not None
