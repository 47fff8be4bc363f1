"""Pod zones and detection of the zone-mirroring pod label."""

from __future__ import annotations

from typing import Any

import pytest

from agent.topology.zones import mirror_label_keys, pod_zone
from tests.snapshot.kube_objects import load, node, pod

NODES = [node("a1", "zone-a"), node("b1", "zone-b"), node("c1", "zone-c"), node("x", None)]


def _pods(*specs: tuple[str | None, dict[str, str]]) -> list[dict[str, Any]]:
    return [pod(f"p{i}", node_name=n, labels=labels) for i, (n, labels) in enumerate(specs)]


@pytest.mark.parametrize(
    ("setting", "pods", "expected"),
    [
        # a key mirroring the zone with two values is found
        ("auto", _pods(("a1", {"zone": "zone-a"}), ("b1", {"zone": "zone-b"})), ("zone",)),
        # one distinct value is not enough
        ("auto", _pods(("a1", {"zone": "zone-a"}), ("a1", {"zone": "zone-a"})), ()),
        # a minority of pods whose value names another zone (a lying label) keeps the key
        (
            "auto",
            _pods(
                ("a1", {"zone": "zone-a"}), ("b1", {"zone": "zone-b"}), ("c1", {"zone": "zone-a"})
            ),
            ("zone",),
        ),
        # ... as long as they are a minority: a tie is no mirror
        ("auto", _pods(("a1", {"zone": "zone-a"}), ("a1", {"zone": "zone-b"})), ()),
        # the lab after a GitOps sync: every pod in zone-a, one labelled zone-b
        (
            "auto",
            _pods(("a1", {"zone": "zone-a"}), ("a1", {"zone": "zone-a"}), ("a1", {"zone": "zone-b"})),
            ("zone",),
        ),
        # one value that is no zone of the cluster disqualifies the key
        (
            "auto",
            _pods(
                ("a1", {"zone": "zone-a"}), ("b1", {"zone": "zone-b"}), ("c1", {"zone": "east"})
            ),
            (),
        ),
        # pods without the key, unscheduled pods and pods on unlabelled nodes do not count
        (
            "auto",
            _pods(
                ("a1", {"zone": "zone-a"}),
                ("b1", {"zone": "zone-b"}),
                ("c1", {}),
                (None, {"zone": "zone-q"}),
                ("x", {"zone": "zone-q"}),
            ),
            ("zone",),
        ),
        # several mirroring keys are all found, sorted
        (
            "auto",
            _pods(("a1", {"z": "zone-a", "az": "zone-a"}), ("b1", {"z": "zone-b", "az": "zone-b"})),
            ("az", "z"),
        ),
        # the node zone label itself is never a mirror (Cilium drops it from identities)
        (
            "auto",
            _pods(
                ("a1", {"topology.kubernetes.io/zone": "zone-a"}),
                ("b1", {"topology.kubernetes.io/zone": "zone-b"}),
            ),
            (),
        ),
        # explicit key and disabled
        ("my-zone", _pods(("a1", {})), ("my-zone",)),
        ("", _pods(("a1", {"zone": "zone-a"}), ("b1", {"zone": "zone-b"})), ()),
    ],
)
def test_mirror_label_keys(
    setting: str, pods: list[dict[str, Any]], expected: tuple[str, ...]
) -> None:
    state = load(NODES + pods).state
    assert mirror_label_keys(setting, pods=state.pods, nodes=state.nodes) == expected


@pytest.mark.parametrize(
    ("node_name", "zone"),
    [("a1", "zone-a"), ("b1", "zone-b"), (None, None), ("x", None), ("missing", None)],
)
def test_pod_zone(node_name: str | None, zone: str | None) -> None:
    state = load([*NODES, pod("p", node_name=node_name)]).state
    assert pod_zone(state.pods[0], state.nodes) == zone
