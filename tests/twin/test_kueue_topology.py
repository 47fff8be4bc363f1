"""Kueue's Topology Aware Scheduling placement (BestFit): levels, modes, groups, taints, failures."""

from __future__ import annotations

from typing import Any

import pytest

from agent.twin.kueue_topology import Leaf, Request, Topology, leader_and_workers, place_all

ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
HOST = "kubernetes.io/hostname"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
MASTER = {"cpu": 2000, "memory": 8 * 2**30, "pods": 1}
WORKER = {"cpu": 4000, "memory": 32 * 2**30, "nvidia.com/gpu": 1, "pods": 1}


def gpu_node(zone: str, name: str, *, gpus: int = 8, tainted: bool = False) -> Leaf:
    return Leaf((zone, name), {"cpu": 48000, "memory": 512 * 2**30, "nvidia.com/gpu": gpus,
                               "pods": 110}, (GPU_TAINT,) if tainted else (), {HOST: name})


def cpu_node(zone: str, name: str, cpu: int = 16) -> Leaf:
    return Leaf((zone, name), {"cpu": cpu * 1000, "memory": 64 * 2**30, "pods": 110}, (),
                {HOST: name})


def cluster(*, tainted: bool = False) -> Topology:
    """The kueue scenario's nodes: two GPU nodes in zone a, four small CPU nodes in zone b."""
    leaves = [gpu_node("a", "gpu-a-0", tainted=tainted), gpu_node("a", "gpu-a-1", tainted=tainted)]
    leaves += [cpu_node("b", f"cpu-b-{i}") for i in range(4)]
    return Topology("default", [ZONE, HOST], leaves)


def master(**kw: Any) -> Request:
    return Request(name="master", count=1, per_pod=MASTER, **kw)


def workers(count: int = 4, **kw: Any) -> Request:
    return Request(name="worker", count=count, per_pod=WORKER,
                   tolerations=(GPU_TOLERATION,), **kw)  # fmt: skip


def hosts(assignment: dict[str, Any]) -> list[tuple[str, int]]:
    return [(d["values"][-1], d["count"]) for d in assignment["domains"]]


def test_implied_tas_places_each_pod_set_on_the_node_with_least_room_that_fits() -> None:
    # What Kueue does with no annotation in a TAS-only ClusterQueue: the job ends up split.
    placed = place_all(cluster(), [master(level=None, unconstrained=True),
                                   workers(level=None, unconstrained=True)])
    assert placed.failure == ""
    assert placed.assignments["master"] == {"levels": [HOST],
                                            "domains": [{"values": ["cpu-b-0"], "count": 1}]}
    assert hosts(placed.assignments["worker"]) == [("gpu-a-0", 4)]


def test_required_zone_per_pod_set_without_a_group_still_splits_the_job() -> None:
    placed = place_all(cluster(), [master(level=ZONE, required=True),
                                   workers(level=ZONE, required=True)])
    assert hosts(placed.assignments["master"]) == [("cpu-b-0", 1)]  # zone b: least room that fits
    assert hosts(placed.assignments["worker"]) == [("gpu-a-0", 4)]


def test_a_group_puts_the_leader_and_its_workers_in_one_zone() -> None:
    placed = place_all(cluster(), [master(level=ZONE, required=True, group="llm"),
                                   workers(level=ZONE, required=True, group="llm")])
    assert placed.failure == ""
    assert hosts(placed.assignments["master"]) == [("gpu-a-0", 1)]
    assert hosts(placed.assignments["worker"]) == [("gpu-a-0", 4)]


def test_the_leader_is_checked_against_the_workers_tolerations() -> None:
    # Kueue fits the leader with the workers' tolerations: on tainted GPU nodes it is placed
    # there even though its own template does not tolerate the taint.
    placed = place_all(cluster(tainted=True), [master(level=ZONE, required=True, group="g"),
                                               workers(level=ZONE, required=True, group="g")])
    assert hosts(placed.assignments["master"]) == [("gpu-a-0", 1)]


def test_untolerated_taints_exclude_a_node() -> None:
    placed = place_all(cluster(tainted=True), [master(level=None, unconstrained=True),
                                               Request(name="worker", count=1, per_pod=WORKER,
                                                       level=None, unconstrained=True)])
    assert placed.failure == 'topology "default" doesn\'t allow to fit any of 1 pod(s)'


@pytest.mark.parametrize(("count", "expected"), [
    (8, [("gpu-a-0", 8)]),
    (12, [("gpu-a-0", 8), ("gpu-a-1", 4)]),
    (16, [("gpu-a-0", 8), ("gpu-a-1", 8)]),
])  # fmt: skip
def test_a_zone_fills_its_fullest_nodes_first_and_best_fits_the_last(
    count: int, expected: list[tuple[str, int]]
) -> None:
    placed = place_all(cluster(), [workers(count, level=ZONE, required=True)])
    assert sorted(hosts(placed.assignments["worker"])) == expected


def test_a_required_level_no_domain_fits_fails_with_kueues_message() -> None:
    placed = place_all(cluster(), [workers(17, level=ZONE, required=True)])
    assert placed.failure == 'topology "default" allows to fit only 16 out of 17 pod(s)'
    assert placed.failed == ("worker",)


def test_a_preferred_level_climbs_and_spreads_at_the_top() -> None:
    leaves = [gpu_node("a", "gpu-a-0", gpus=2), gpu_node("b", "gpu-b-0", gpus=2)]
    topology = Topology("default", [ZONE, HOST], leaves)
    placed = place_all(topology, [workers(4, level=ZONE)])
    assert placed.failure == ""
    assert sorted(hosts(placed.assignments["worker"])) == [("gpu-a-0", 2), ("gpu-b-0", 2)]
    placed = place_all(Topology("default", [ZONE, HOST], leaves),
                       [workers(4, level=ZONE, required=True)])
    assert placed.failure == 'topology "default" allows to fit only 2 out of 4 pod(s)'


def test_a_wider_level_keeps_the_pod_sets_apart_when_they_are_not_grouped() -> None:
    leaves = [Leaf(("r1", *leaf.values), leaf.free, leaf.taints, leaf.labels)
              for leaf in [gpu_node("a", "gpu-a-0"), cpu_node("b", "cpu-b-0")]]  # fmt: skip
    topology = Topology("default", [REGION, ZONE, HOST], leaves)
    placed = place_all(topology, [master(level=REGION, required=True),
                                  workers(level=REGION, required=True)])
    assert hosts(placed.assignments["master"]) == [("cpu-b-0", 1)]
    assert hosts(placed.assignments["worker"]) == [("gpu-a-0", 4)]


def test_the_lowest_level_not_being_the_hostname_names_the_full_domain() -> None:
    leaves = [Leaf(("a", "rack-1"), {"cpu": 8000, "pods": 10}),
              Leaf(("b", "rack-2"), {"cpu": 2000, "pods": 10})]  # fmt: skip
    topology = Topology("t", [ZONE, "cloud.example.com/rack"], leaves)
    placed = place_all(topology, [Request(name="main", count=2, per_pod={"cpu": 1000, "pods": 1},
                                          level=ZONE, required=True)])
    assert placed.assignments["main"] == {"levels": [ZONE, "cloud.example.com/rack"],
                                          "domains": [{"values": ["b", "rack-2"], "count": 2}]}


def test_usage_assumed_by_one_pod_set_is_not_offered_to_the_next() -> None:
    topology = Topology("default", [ZONE, HOST], [gpu_node("a", "gpu-a-0", gpus=4)])
    first = place_all(topology, [workers(4, level=ZONE, required=True)])
    assert first.failure == ""
    second = place_all(topology, [workers(1, level=ZONE, required=True)])
    assert second.failure == 'topology "default" doesn\'t allow to fit any of 1 pod(s)'


def test_an_unknown_level_is_refused() -> None:
    placed = place_all(cluster(), [workers(level="cloud.example.com/block", required=True)])
    assert placed.failure == "no requested topology level: cloud.example.com/block"


def test_the_smaller_pod_set_of_a_group_leads() -> None:
    leader, rest = leader_and_workers([workers(4), master()])
    assert leader is not None and leader.name == "master" and rest.name == "worker"
    leader, rest = leader_and_workers([master(), workers(4)])
    assert leader is not None and leader.name == "master" and rest.name == "worker"
    assert leader_and_workers([workers(4)]) == (None, workers(4))
