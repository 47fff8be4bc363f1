"""The scheduler controller: binds through pods/binding, writes Scheduled / FailedScheduling events
and PodScheduled=False, and retries an unschedulable pod when the cluster changes."""

from __future__ import annotations

from typing import Any

from agent.twin.resources import lookup
from agent.twin.scenario import make_node
from tests.support import objects
from tests.twin.twin_fixtures import PODS, fast, running, wait

EVENTS = lookup("events")


def gpu_pod(name: str) -> dict[str, Any]:
    """A pod of one container with a GPU limit, not yet scheduled (no status)."""
    return objects.pod(name, phase=None, containers=[objects.container(name="c", image="x", gpus=1)])


def events_for(cluster: Any, name: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in cluster.store.list(EVENTS, namespace="ml")[0]
            if e["involvedObject"]["name"] == name and e["reason"] == reason]  # fmt: skip


def test_unschedulable_then_scheduled_when_a_node_arrives() -> None:
    with running(fast("seed-degraded")) as cluster:
        cluster.store.create(PODS, gpu_pod("needs-gpu"))  # no toleration: GPU nodes are tainted
        wait(cluster, lambda: bool(events_for(cluster, "needs-gpu", "FailedScheduling")))
        (event,) = events_for(cluster, "needs-gpu", "FailedScheduling")
        assert event["type"] == "Warning"
        assert event["source"]["component"] == "default-scheduler"
        assert event["message"] == (
            "0/6 nodes are available: 2 node(s) had untolerated taint {nvidia.com/gpu: present}, "
            "4 Insufficient nvidia.com/gpu."
        )
        pod = cluster.store.get(PODS, "needs-gpu", namespace="ml")
        assert pod["status"]["phase"] == "Pending"
        (cond,) = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
        assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
        cluster.store.create(lookup("nodes"), make_node("gpu-c-0", zone="us-east-1c", gpus=4))
        wait(
            cluster,
            lambda: (
                cluster.store.get(PODS, "needs-gpu", namespace="ml")["spec"].get("nodeName")
                == "gpu-c-0"
            ),
        )
        wait(cluster, lambda: bool(events_for(cluster, "needs-gpu", "Scheduled")))
        (done,) = events_for(cluster, "needs-gpu", "Scheduled")
        assert done["message"] == "Successfully assigned ml/needs-gpu to gpu-c-0"


def test_same_scenario_places_pods_the_same_way() -> None:
    placements = []
    for _ in range(2):
        with running(fast("seed-degraded")) as cluster:
            wait(
                cluster,
                lambda: (
                    len(
                        [
                            p
                            for p in cluster.store.list(PODS, namespace="ml")[0]
                            if p["spec"].get("nodeName")
                        ]
                    )
                    == 5
                ),
            )
            placements.append(
                {
                    p["metadata"]["name"]: p["spec"]["nodeName"]
                    for p in cluster.store.list(PODS, namespace="ml")[0]
                }
            )
    assert placements[0] == placements[1]
