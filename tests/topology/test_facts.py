"""Cluster facts kept pod by pod equal the same facts computed from scratch (and the core's own
mirror-key detection and capacity counting), whatever the order of adds, replaces and removals."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from agent.model.cluster import ZONE_LABEL, Node, Pod, PodPhase
from agent.topology.capacity import CapacityIndex
from agent.topology.facts import FactsIndex, cluster_facts
from agent.topology.zones import detect_mirror_label_keys

NODES = {
    f"n{i}": Node(
        f"n{i}",
        labels={ZONE_LABEL: "abc"[i % 3]} if i != 7 else {},  # n7: no zone
        gpu_allocatable=8 if i % 2 else 0,
        unschedulable=i == 5,
    )
    for i in range(9)
}


def random_pod(rng: random.Random, i: int) -> Pod:
    node = rng.choice([*NODES, None, "ghost"])
    zone = NODES[node].labels.get(ZONE_LABEL) if node in NODES else None
    labels = {"app": rng.choice("xy")}
    if rng.random() < 0.8:  # a zone-mirroring label, right or (sometimes) wrong
        labels["zone"] = zone if zone and rng.random() < 0.95 else rng.choice("abc")
    if rng.random() < 0.5:
        labels["netpol/zone"] = zone or "a"
    return Pod(
        namespace=rng.choice(["ml", "web", "batch"]),
        name=f"p{i}",
        labels=labels,
        node_name=node,
        phase=rng.choice([PodPhase.RUNNING, PodPhase.RUNNING, PodPhase.SUCCEEDED, PodPhase.PENDING]),
        gpu_request=rng.choice([0, 1, 4, 8]),
    )


@pytest.mark.parametrize("seed", range(8))
def test_incremental_facts_equal_facts_from_scratch(seed: int) -> None:
    rng = random.Random(seed)
    index = FactsIndex(NODES)
    live: dict[int, Pod] = {}
    for step in range(400):
        key = rng.randrange(60)
        if key in live and rng.random() < 0.3:
            index.remove(key)
            del live[key]
        else:
            live[key] = random_pod(rng, step)
            index.add(key, live[key])
    got = index.facts()
    pods = list(live.values())
    want = cluster_facts(NODES, pods)
    # pods_in holds the same pods (order: a key moved to another namespace goes last there)
    assert replace(got, pods_in={}) == replace(want, pods_in={})
    assert got.mirror_keys == detect_mirror_label_keys(pods, NODES)
    full = CapacityIndex(NODES, pods)
    counted = CapacityIndex(NODES, (), used=got.gpu_used, free=got.zone_free)
    assert counted.free_gpus() == full.free_gpus()
    some_job = [p for p in pods if p.namespace == "ml"]
    assert counted.free_gpus(some_job) == full.free_gpus(some_job)
    assert {ns: sorted(p.name for p in ps) for ns, ps in got.pods_in.items()} == {
        ns: sorted(p.name for p in pods if p.namespace == ns) for ns in {p.namespace for p in pods}
    }
    assert got.zones == ("a", "b", "c")


@pytest.mark.parametrize("seed", range(8))
def test_a_bulk_count_equals_pod_by_pod(seed: int) -> None:
    rng = random.Random(seed)
    pods = {i: random_pod(rng, i) for i in range(rng.randrange(1, 300))}
    bulk = FactsIndex(NODES)
    bulk.add_many(pods)
    want = cluster_facts(NODES, pods.values())
    got = bulk.facts()
    assert replace(got, pods_in={}) == replace(want, pods_in={})
    assert got.pods_in == want.pods_in  # cluster order, namespace by namespace
    # later changes count on from the bulk: the same as an index built pod by pod
    one_by_one = FactsIndex(NODES)
    for key, pod in pods.items():
        one_by_one.add(key, pod)
    for step in range(100):
        key = rng.randrange(400)
        for index in (bulk, one_by_one):
            if step % 3 == 0:
                index.remove(key)
            else:
                index.add(key, random_pod(random.Random(step), key))
    assert bulk.facts() == one_by_one.facts()
