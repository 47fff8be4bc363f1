"""Pod zones and detection of the zone-mirroring pod label."""

from __future__ import annotations

from typing import Any

import pytest

from agent.model.cluster import Pod, PodPhase
from agent.topology.zones import awaited_labels, mirror_label_keys, pod_zone, zone_keys
from tests.support.objects import node, pod
from tests.support.snapshots import load

NODES = [node("a1", "zone-a", gpus=8), node("b1", "zone-b", gpus=8), node("c1", "zone-c", gpus=8), node("x", None, gpus=8)]


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


# -- labels still to come ---------------------------------------------------------------------

ZONE_OF = {"a1": "zone-a", "b1": "zone-b", "bare": None}
MIRROR = "netpol/zone"


def _model_pod(name: str, node_name: str | None, phase: PodPhase = PodPhase.PENDING,
         **labels: str) -> Pod:  # fmt: skip
    return Pod("ml", name, labels={k.replace("__", "/"): v for k, v in labels.items()},
               node_name=node_name, phase=phase)


@pytest.mark.parametrize(
    ("pods", "keys", "awaited"),
    [
        # bound, not started, without the key: its label is still to come
        ([_model_pod("w0", "a1")], (MIRROR,), ("w0",)),
        # carries its node's zone: settled; another zone before it starts: rewritten yet
        ([_model_pod("w0", "a1", netpol__zone="zone-a")], (MIRROR,), ()),
        ([_model_pod("w0", "a1", netpol__zone="zone-b")], (MIRROR,), ("w0",)),
        # started: what it carries is what the policies see (a lie is its own verdict)
        ([_model_pod("w0", "a1", PodPhase.RUNNING)], (MIRROR,), ()),
        ([_model_pod("w0", "a1", PodPhase.RUNNING, netpol__zone="zone-b")], (MIRROR,), ()),
        # not bound (the job is pending), a node without a zone, no key the policies read
        ([_model_pod("w0", None)], (MIRROR,), ()),
        ([_model_pod("w0", "bare")], (MIRROR,), ()),
        ([_model_pod("w0", "a1")], (), ()),
        # every key the policies read, on every pod of the gang
        ([_model_pod("m0", "b1", netpol__zone="zone-b"), _model_pod("w0", "a1", netpol__zone="zone-a"),
          _model_pod("w1", "a1")], (MIRROR,), ("w1",)),
        ([_model_pod("w0", "a1", netpol__zone="zone-a")], (MIRROR, "zone"), ("w0",)),
    ],
)
def test_awaited_labels(pods: list[Pod], keys: tuple[str, ...], awaited: tuple[str, ...]) -> None:
    assert awaited_labels(pods, keys=keys, node_zone=ZONE_OF) == awaited


@pytest.mark.parametrize(
    ("values", "mirrors", "readable", "keys"),
    [
        # a selector comparing a key with a zone name: a zone-mirroring key, before any pod
        # carries it (the policies alone say so)
        ({MIRROR: {"zone-a"}, "app": {"web"}}, (), (MIRROR, "app"), (MIRROR,)),
        ({MIRROR: {"zone-x", "zone-b"}}, (), (MIRROR,), (MIRROR,)),
        # a detected mirror key the policies read, whatever the values compared
        ({"zone": {"anything"}}, ("zone",), ("zone",), ("zone",)),
        # a mirror key no policy reads cannot change a verdict
        ({"app": {"web"}}, ("zone",), ("app", "zone"), ()),
        # a key left out of identities never matches: its arrival changes nothing
        ({MIRROR: {"zone-a"}}, (), (), ()),
    ],
)
def test_zone_keys(values: dict[str, set[str]], mirrors: tuple[str, ...],
                   readable: tuple[str, ...], keys: tuple[str, ...]) -> None:  # fmt: skip
    assert zone_keys(values, zones=("zone-a", "zone-b"), mirror_keys=mirrors,
                     readable=readable) == keys  # fmt: skip
