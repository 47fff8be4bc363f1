"""Free GPUs per zone, excluding one job's own pods; cordoned nodes do not count."""

from __future__ import annotations

from agent.topology.capacity import CapacityIndex
from tests.support.objects import node, pod
from tests.support.snapshots import load


def test_free_gpus_per_zone() -> None:
    snap = load(
        [
            node("a1", "zone-a", gpus=8),
            node("a2", "zone-a", gpus=8, cordoned=True),
            node("b1", "zone-b", gpus=4),
            node("c1", "zone-c", gpus=0),
            pod("other", node_name="a1", gpus=3),
            pod("mine-0", node_name="a1", gpus=2),
            pod("mine-1", node_name="b1", gpus=4),
            pod("done", node_name="b1", gpus=4, phase="Succeeded"),
            pod("pending", gpus=8),
            pod("over", node_name="b1", gpus=2),  # over-committed node: never below zero
        ]
    )
    state = snap.state
    index = CapacityIndex(state.nodes, state.pods)
    mine = [p for p in state.pods if p.name.startswith("mine")]
    assert index.free_gpus() == {"zone-a": 3, "zone-b": 0, "zone-c": 0}
    assert index.free_gpus(mine) == {"zone-a": 5, "zone-b": 2, "zone-c": 0}
