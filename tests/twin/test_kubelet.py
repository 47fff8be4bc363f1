"""The twin's kubelet: start, zone label, crash loop, Never restart policy, graceful deletion, GPUs."""

from __future__ import annotations

import time
from typing import Any

from agent.twin.apierror import ApiError
from tests.support import objects
from tests.twin.twin_fixtures import PODS, fast, running, wait


def bare_pod(name: str, *, node: str, gpu: int = 0, restart: str = "Always") -> dict[str, Any]:
    """A pod bound to `node` by hand (no scheduler, tolerates every taint; no status yet)."""
    main = objects.container(image="img:1", gpus=gpu) | ({} if gpu else {"resources": {}})
    return objects.pod(name, node_name=node, phase=None, containers=[main],
                       spec={"restartPolicy": restart, "tolerations": [{"operator": "Exists"}]})


def get(cluster: Any, name: str) -> dict[str, Any]:
    return cluster.store.get(PODS, name, namespace="ml")


def phase(cluster: Any, name: str) -> str | None:
    try:
        return get(cluster, name)["status"].get("phase")
    except ApiError:
        return None


def test_bound_pod_starts_with_statuses_ip_and_zone_label() -> None:
    with running(fast("seed-blocked")) as cluster:
        cluster.store.create(PODS, bare_pod("p", node="gpu-a-0"))
        wait(cluster, lambda: phase(cluster, "p") == "Running")
        pod = get(cluster, "p")
        (cs,) = pod["status"]["containerStatuses"]
        assert cs["ready"] is True and cs["restartCount"] == 0 and "running" in cs["state"]
        assert pod["status"]["podIP"].startswith("10.244.")
        assert pod["status"]["qosClass"] == "BestEffort"
        assert {c["type"] for c in pod["status"]["conditions"] if c["status"] == "True"} >= {
            "Ready",
            "ContainersReady",
        }
        # seed-blocked emulates the webhook that mirrors the node zone into a pod label
        assert pod["metadata"]["labels"]["netpol.example.com/zone"] == "us-east-1a"


def test_crash_backs_off_then_restarts() -> None:
    with running(fast("seed-degraded")) as cluster:
        cluster.store.create(PODS, bare_pod("p", node="cpu-b-0"))
        wait(cluster, lambda: phase(cluster, "p") == "Running")
        cluster.kubelet.crash("ml", "p", message="boom")
        (cs,) = get(cluster, "p")["status"]["containerStatuses"]
        assert cs["state"]["waiting"]["reason"] == "CrashLoopBackOff"
        assert cs["lastState"]["terminated"]["reason"] == "Error"
        assert cs["restartCount"] == 1
        assert get(cluster, "p")["status"]["phase"] == "Running"
        wait(
            cluster,
            lambda: "running" in get(cluster, "p")["status"]["containerStatuses"][0]["state"],
        )


def test_crash_with_restart_policy_never_fails_the_pod() -> None:
    with running(fast("seed-degraded")) as cluster:
        cluster.store.create(PODS, bare_pod("p", node="cpu-b-0", restart="Never"))
        wait(cluster, lambda: phase(cluster, "p") == "Running")
        cluster.kubelet.crash("ml", "p", message="boom", exit_code=3)
        pod = get(cluster, "p")
        assert pod["status"]["phase"] == "Failed"
        assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3


def test_graceful_deletion_finishes_long_before_the_grace_period() -> None:
    with running(fast("seed-degraded"), speed=5) as cluster:
        cluster.store.create(PODS, bare_pod("p", node="cpu-b-0"))
        wait(cluster, lambda: phase(cluster, "p") == "Running")
        started = time.monotonic()
        deleted = cluster.store.delete(PODS, "p", namespace="ml")
        assert deleted["metadata"]["deletionTimestamp"]  # graceful: 30 s by default
        wait(cluster, lambda: phase(cluster, "p") is None, timeout=10)
        assert time.monotonic() - started < 10


def test_gpus_are_handed_out_once_and_freed() -> None:
    with running(fast("seed-degraded")) as cluster:
        for name in ("a", "b"):
            cluster.store.create(PODS, bare_pod(name, node="gpu-a-0", gpu=2))
        wait(cluster, lambda: phase(cluster, "a") == phase(cluster, "b") == "Running")
        held = cluster.kubelet.gpu_holders()["gpu-a-0"]
        mine = {i: h.pod for i, h in held.items() if h.pod in ("a", "b")}
        assert sorted(mine.values()) == ["a", "a", "b", "b"]
        cluster.store.delete(PODS, "a", namespace="ml", grace_period_seconds=0)
        wait(
            cluster,
            lambda: "a" not in {h.pod for h in cluster.kubelet.gpu_holders()["gpu-a-0"].values()},
        )
        assert sum(h.pod == "b" for h in cluster.kubelet.gpu_holders()["gpu-a-0"].values()) == 2
