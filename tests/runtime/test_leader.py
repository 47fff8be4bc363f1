"""Leader election: the pure decision and deadline (table-driven), and the loop on an in-memory
Lease store with resourceVersion conflicts (the API server round trip is covered by the twin tests).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from agent.remediation.fence import open_fence
from agent.runtime.leader import (
    AlwaysLeader,
    LeaderElector,
    LeaseAction,
    LeaseConflictError,
    LeaseRecord,
    LeaseUnavailableError,
    decide,
    leading,
    lease_body,
    record_from,
)

T0 = datetime(2026, 11, 29, 12, 0, 0, 123456, tzinfo=UTC)


def rec(holder: str, *, duration: int = 15, rv: str = "1") -> LeaseRecord:
    return LeaseRecord(holder, duration, T0, T0, 0, rv)


@pytest.mark.parametrize(
    ("record", "unchanged_for", "action"),
    [
        (None, 0.0, LeaseAction.CREATE),
        (rec("me"), 0.0, LeaseAction.RENEW),
        (rec("me"), 100.0, LeaseAction.RENEW),
        (rec(""), 0.0, LeaseAction.ACQUIRE),
        (rec("other"), 14.9, LeaseAction.WAIT),
        (rec("other"), 15.0, LeaseAction.ACQUIRE),
        (rec("other", duration=60), 30.0, LeaseAction.WAIT),
    ],
)
def test_decide(record: LeaseRecord | None, unchanged_for: float, action: LeaseAction) -> None:
    assert decide(record, identity="me", unchanged_for=unchanged_for) is action


@pytest.mark.parametrize(
    ("last", "now", "expected"),
    [(None, 5.0, False), (0.0, 9.9, True), (0.0, 10.0, False), (5.0, 14.0, True)],
)
def test_leading_deadline(last: float | None, now: float, expected: bool) -> None:
    assert leading(last, now=now, renew_deadline=10.0) is expected


def test_body_round_trip() -> None:
    record = LeaseRecord("me", 15, T0, T0, 3, "42")
    body = lease_body(record, name="l", namespace="ns")
    assert body["spec"]["renewTime"] == "2026-11-29T12:00:00.123456Z"
    assert body["metadata"]["resourceVersion"] == "42"
    assert record_from(body) == record


class MemoryLeases:
    """A Lease store with the API server's optimistic concurrency (409 on a stale version)."""

    def __init__(self) -> None:
        self.record: LeaseRecord | None = None
        self.version = 0
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise LeaseUnavailableError("down")

    def get(self, *, timeout: float) -> LeaseRecord | None:
        self._check()
        return self.record

    def create(self, record: LeaseRecord, *, timeout: float) -> LeaseRecord:
        self._check()
        if self.record is not None:
            raise LeaseConflictError("exists")
        self.version += 1
        self.record = replace(record, resource_version=str(self.version))
        return self.record

    def replace(self, record: LeaseRecord, *, timeout: float) -> LeaseRecord:
        self._check()
        if self.record is None or record.resource_version != self.record.resource_version:
            raise LeaseConflictError("stale")
        self.version += 1
        self.record = replace(record, resource_version=str(self.version))
        return self.record


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def elector(store: MemoryLeases, clock: Clock, name: str, events: list[str]) -> LeaderElector:
    return LeaderElector(
        store,  # type: ignore[arg-type]
        identity=name,
        lease_duration=15,
        renew_deadline=10,
        retry_period=2,
        on_started_leading=lambda: events.append(f"{name}+"),
        on_stopped_leading=lambda: events.append(f"{name}-"),
        monotonic=clock,
        wall=lambda: T0,
    )


def test_one_leader_takeover_after_lease_duration_and_release() -> None:
    store, clock, events = MemoryLeases(), Clock(), []
    a, b = elector(store, clock, "a", events), elector(store, clock, "b", events)
    a.step()
    b.step()
    assert a.is_leader() and not b.is_leader()
    # a dies (no more steps); b takes over once the lease has been unchanged for 15 s
    for _ in range(7):
        clock.t += 2
        b.step()
    assert not b.is_leader()
    clock.t += 2
    b.step()
    assert b.is_leader()
    assert store.record is not None and store.record.holder == "b"
    assert store.record.transitions == 1
    # a wakes up: its renew hits a stale resourceVersion, and it knows it lost
    a.step()
    assert not a.is_leader()
    assert events == ["a+", "b+", "a-"]
    # b releases on shutdown: a acquires at once
    b.release()
    a.step()
    assert a.is_leader()


def test_leader_stops_within_renew_deadline_when_the_api_is_down() -> None:
    store, clock, events = MemoryLeases(), Clock(), []
    a = elector(store, clock, "a", events)
    a.step()
    assert a.is_leader()
    store.down = True
    clock.t += 9.9
    a.step()
    assert a.is_leader()
    clock.t += 0.1  # 10 s since the last renewal: leader work must stop
    assert not a.is_leader()
    a.step()
    assert events == ["a+", "a-"]


class SlowLeases(MemoryLeases):
    """Each read takes `delay` seconds of the clock (a slow API server)."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock
        self.delay = 0.0

    def get(self, *, timeout: float) -> LeaseRecord | None:
        self.clock.t += self.delay
        return super().get(timeout=timeout)


@pytest.mark.parametrize("slow", [False, True], ids=["api-down-then-back", "slow-renewal"])
def test_a_renewal_after_the_deadline_ends_the_term_and_starts_a_new_one(slow: bool) -> None:
    """is_leader() was False between the deadline and the late renewal (leader work refused), so
    the renewal starts a new term: on_started_leading runs again and catches up."""
    clock, events = Clock(), []
    store = SlowLeases(clock)
    a = elector(store, clock, "a", events)
    a.step()
    if slow:  # the renewal's read starts 9 s in and answers 2 s later, past the deadline
        clock.t += 9
        store.delay = 2
        a.step()
    else:  # the API is away past the deadline; the lease is still a's when it comes back
        store.down = True
        clock.t += 9
        a.step()
        clock.t += 1.5
        assert not a.is_leader()
        store.down = False
        a.step()
    assert a.is_leader() and a.late_renewals == 1
    assert events == ["a+", "a-", "a+"]
    assert store.record is not None and store.record.holder == "a"
    assert a.term() == 2  # a new term: a remediation fenced to term 1 writes no more


def test_terms_number_each_time_a_replica_starts_leading_and_none_while_it_follows() -> None:
    store, clock, events = MemoryLeases(), Clock(), []
    a, b = elector(store, clock, "a", events), elector(store, clock, "b", events)
    a.step()
    b.step()
    assert (a.term(), b.term()) == (1, None)
    fence = open_fence(a)
    assert fence is not None and fence.holds()
    a.release()  # the lease given up: a's term ended, b takes over
    b.step()
    a.step()
    assert (a.term(), b.term()) == (None, 1)
    assert not fence.holds()
    assert AlwaysLeader().term() == 0


def test_a_renewal_within_the_deadline_continues_the_term() -> None:
    store, clock, events = MemoryLeases(), Clock(), []
    a = elector(store, clock, "a", events)
    for _ in range(5):
        a.step()
        clock.t += 9.9
    assert a.is_leader() and events == ["a+"]


def test_create_race_has_one_winner() -> None:
    store, clock, events = MemoryLeases(), Clock(), []
    a, b = elector(store, clock, "a", events), elector(store, clock, "b", events)
    # both read "no lease", then both create: the second create conflicts
    assert a.client.get(timeout=1) is None
    a.step()
    b.step()
    assert [e.is_leader() for e in (a, b)] == [True, False]


def test_bad_timings_are_rejected() -> None:
    with pytest.raises(ValueError, match="lease_duration > renew_deadline"):
        LeaderElector(MemoryLeases(), identity="x", lease_duration=5, renew_deadline=10, retry_period=2)  # type: ignore[arg-type]


def test_annotations_ride_on_renewals_survive_takeover_and_release() -> None:
    store, clock, events = MemoryLeases(), Clock(), []
    a, b = elector(store, clock, "a", events), elector(store, clock, "b", events)
    a.step()
    a.set_annotation("zonemedic.io/sweeps-done", '{"x": 1}')
    assert a.annotations()["zonemedic.io/sweeps-done"] == '{"x": 1}'  # pending, visible locally
    clock.t += 2
    a.step()  # the renewal writes it
    assert store.record is not None and store.record.annotations == {"zonemedic.io/sweeps-done": '{"x": 1}'}
    a.set_annotation("zonemedic.io/sweeps-done", '{"x": 2}')
    a.release()  # the release writes pending ones too
    assert store.record.annotations == {"zonemedic.io/sweeps-done": '{"x": 2}'}
    b.step()
    assert b.is_leader() and b.annotations() == {"zonemedic.io/sweeps-done": '{"x": 2}'}


def test_a_follower_logs_whom_it_follows_once_per_holder(caplog: pytest.LogCaptureFixture) -> None:
    store, clock, events = MemoryLeases(), Clock(), []
    a, b = elector(store, clock, "a", events), elector(store, clock, "b", events)
    caplog.set_level("INFO", logger="agent.runtime.leader")
    a.step()
    for _ in range(3):  # b waits three times behind a: one line
        clock.t += 2
        a.step()
        b.step()
    a.release()
    b.step()  # b leads now; a follows it
    a.step()

    def following(identity: str) -> list[str]:
        return [
            r.holder  # type: ignore[attr-defined]
            for r in caplog.records
            if r.getMessage() == "following" and r.identity == identity  # type: ignore[attr-defined]
        ]

    assert following("b") == ["a"]
    assert following("a") == ["b"]


def test_the_first_step_can_be_taken_on_the_callers_thread() -> None:
    import threading

    store = MemoryLeases()
    on_thread: list[str] = []
    a = LeaderElector(
        store,  # type: ignore[arg-type]
        identity="a", lease_duration=15, renew_deadline=10, retry_period=2,
        on_started_leading=lambda: on_thread.append(threading.current_thread().name),
    )
    thread = a.run_in_thread(step_first=True)
    try:
        # leading when it returns: the caller can start work knowing it, the callback ran here
        assert a.is_leader() and store.record is not None and store.record.holder == "a"
        assert on_thread == [threading.current_thread().name]
        version = store.version
        assert thread.is_alive() and store.version == version  # the loop waits before renewing
    finally:
        a.stop(timeout=5)
    assert not thread.is_alive() and not a.is_leader()
    assert store.record is not None and store.record.holder == ""  # released on stop
