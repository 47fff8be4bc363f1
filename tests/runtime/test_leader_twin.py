"""Leader election against the twin's real coordination.k8s.io/v1 Lease API over HTTP.

The takeover after a crash runs on an injected monotonic clock (the elector measures lease expiry
with it), so the test steps time instead of sleeping; the threaded loop runs on the real clock and
is observed through condition waits."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.runtime.leader import LeaderElector, LeaseClient, LeaseRecord
from agent.settings import KubernetesSettings
from agent.sources.kubeapi import KubeApi, build_api_client
from agent.twin import apiserver, kubeconfig
from agent.twin.store import Store
from tests.support.waiting import wait


class SteppedClock:
    """A monotonic clock the test advances by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class CountingLeaseClient(LeaseClient):
    """The real lease client, counting the reads (each loop step reads the lease once)."""

    reads = 0

    def get(self, *, timeout: float) -> LeaseRecord | None:
        self.reads += 1
        return super().get(timeout=timeout)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[KubeApi]:
    store = Store()
    server = apiserver.serve(store)
    path = kubeconfig.write(tmp_path / "kubeconfig", server.url)
    try:
        yield KubeApi(build_api_client(KubernetesSettings(kubeconfig=str(path))))
    finally:
        server.stop()
        store.close()


def elector(api: KubeApi, name: str, events: list[str], **timing: Any) -> LeaderElector:
    return LeaderElector(
        CountingLeaseClient(api, namespace="default", name="zonemedic-leader"),
        identity=name,
        lease_duration=timing.get("lease_duration", 2.0),
        renew_deadline=timing.get("renew_deadline", 1.5),
        retry_period=timing.get("retry_period", 0.2),
        on_started_leading=lambda: events.append(f"{name}+"),
        on_stopped_leading=lambda: events.append(f"{name}-"),
        monotonic=timing.get("monotonic", time.monotonic),
    )


def test_one_leader_then_takeover_within_the_lease_duration_after_a_crash(api: KubeApi) -> None:
    events: list[str] = []
    clock = SteppedClock()
    a = elector(api, "a", events, monotonic=clock)
    b = elector(api, "b", events, monotonic=clock)
    a.step()
    b.step()
    assert a.is_leader() and not b.is_leader()
    lease = api.json("GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases/zonemedic-leader")
    assert lease["spec"]["holderIdentity"] == "a"
    assert lease["spec"]["renewTime"].endswith("Z")
    for _ in range(3):  # a renews every retry period, b watches the record change
        clock.advance(0.2)
        a.step()
        b.step()
    assert not b.is_leader()
    crashed = clock()  # a stops renewing, without releasing (a crash)
    while not b.is_leader():
        clock.advance(0.2)  # one retry period per step
        b.step()
        assert clock() - crashed < 5
    took = clock() - crashed
    # not before the lease expired, and at most one retry period after
    assert 2.0 <= took <= 2.0 + 0.2 + 1e-9, took
    a.step()  # a wakes up: its renew conflicts, it stops leading at once
    assert not a.is_leader()
    assert events == ["a+", "b+", "a-"]
    lease = api.json("GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases/zonemedic-leader")
    assert lease["spec"]["holderIdentity"] == "b" and lease["spec"]["leaseTransitions"] == 1


def test_release_hands_over_at_once_and_a_thread_runs_the_loop(api: KubeApi) -> None:
    events: list[str] = []
    a, b = elector(api, "a", events), elector(api, "b", events)
    a.run_in_thread()
    wait(a.is_leader, timeout=30, what="a to lead", interval=0.02)
    b.run_in_thread()
    assert isinstance(b.client, CountingLeaseClient)
    reads = b.client.reads
    # b read the held lease three times
    wait(lambda: b.client.reads >= reads + 3, timeout=30, what="b's reads", interval=0.02)
    assert not b.is_leader() and a.is_leader()
    a.stop(timeout=5)  # graceful: releases
    started = time.monotonic()
    wait(b.is_leader, timeout=30, what="b to lead", interval=0.02)
    assert time.monotonic() - started < 1.0  # released: no waiting for expiry (2 s)
    b.stop(timeout=5)
    assert events == ["a+", "a-", "b+", "b-"]
