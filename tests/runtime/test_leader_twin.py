"""Leader election against the twin's real coordination.k8s.io/v1 Lease API over HTTP."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.runtime.leader import LeaderElector, LeaseClient
from agent.settings import KubernetesSettings
from agent.sources.kubeapi import KubeApi, build_api_client

apiserver = pytest.importorskip("agent.twin.apiserver", reason="the twin is not merged yet")
kubeconfig = pytest.importorskip("agent.twin.kubeconfig")
Store = pytest.importorskip("agent.twin.store").Store


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
        LeaseClient(api, namespace="default", name="zonemedic-leader"),
        identity=name,
        lease_duration=timing.get("lease_duration", 2.0),
        renew_deadline=timing.get("renew_deadline", 1.5),
        retry_period=timing.get("retry_period", 0.2),
        on_started_leading=lambda: events.append(f"{name}+"),
        on_stopped_leading=lambda: events.append(f"{name}-"),
    )


def test_one_leader_then_takeover_within_the_lease_duration_after_a_crash(api: KubeApi) -> None:
    events: list[str] = []
    a, b = elector(api, "a", events), elector(api, "b", events)
    a.step()
    b.step()
    assert a.is_leader() and not b.is_leader()
    lease = api.json("GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases/zonemedic-leader")
    assert lease["spec"]["holderIdentity"] == "a"
    assert lease["spec"]["renewTime"].endswith("Z")
    for _ in range(3):  # a renews, b watches the record change
        time.sleep(0.2)
        a.step()
        b.step()
    assert not b.is_leader()
    crashed = time.monotonic()  # a stops renewing, without releasing (a crash)
    while not b.is_leader():
        b.step()
        time.sleep(0.2)
        assert time.monotonic() - crashed < 5
    took = time.monotonic() - crashed
    assert took <= 2.0 + 0.2 + 0.5, took  # lease duration + one retry period (+ slack)
    a.step()  # a wakes up: its renew conflicts, it stops leading at once
    assert not a.is_leader()
    assert events == ["a+", "b+", "a-"]
    lease = api.json("GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases/zonemedic-leader")
    assert lease["spec"]["holderIdentity"] == "b" and lease["spec"]["leaseTransitions"] == 1


def test_release_hands_over_at_once_and_a_thread_runs_the_loop(api: KubeApi) -> None:
    events: list[str] = []
    a, b = elector(api, "a", events), elector(api, "b", events)
    a.run_in_thread()
    deadline = time.monotonic() + 5
    while not a.is_leader() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert a.is_leader()
    b.run_in_thread()
    time.sleep(0.5)
    assert not b.is_leader()
    a.stop(timeout=5)  # graceful: releases
    started = time.monotonic()
    while not b.is_leader() and time.monotonic() - started < 5:
        time.sleep(0.05)
    assert b.is_leader()
    assert time.monotonic() - started < 1.0  # released: no waiting for expiry
    b.stop(timeout=5)
    assert events == ["a+", "a-", "b+", "b-"]
