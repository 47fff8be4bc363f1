"""Each filter and score of the twin's scheduler on small tables, and the FitError messages."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from agent.twin.scheduler_cycle import schedule
from agent.twin.scheduler_snapshot import Snapshot
from tests.twin.scheduler_tables import GPU_TAINT, ZONE, node, pod

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def run(
    p: dict[str, Any],
    nodes: list[dict[str, Any]],
    pods: list[dict[str, Any]] = (),
    seed: int = 1,
    namespaces: list[dict[str, Any]] = (),
) -> tuple[str | None, str]:  # type: ignore[assignment]
    decision = schedule(p, Snapshot.build(nodes, pods, namespaces), random.Random(seed))
    return decision.node, decision.message


def six_nodes() -> list[dict[str, Any]]:
    """The incident's shape: 2 GPU nodes (tainted) in zone a, 4 CPU nodes in zone b."""
    gpu = [node(f"gpu-{i}", zone="a", gpu=8, taints=[GPU_TAINT]) for i in range(2)]
    cpu = [node(f"cpu-{i}", zone="b") for i in range(4)]
    return gpu + cpu


def test_failure_message_reads_like_kube_scheduler() -> None:
    chosen, message = run(pod("w", gpu=1), six_nodes())
    assert chosen is None
    assert message == (
        "0/6 nodes are available: 2 node(s) had untolerated taint {nvidia.com/gpu: present}, "
        "4 Insufficient nvidia.com/gpu."
    )


def test_toleration_lets_the_gpu_pod_in() -> None:
    chosen, _ = run(pod("w", gpu=1, tolerations=[GPU_TOLERATION]), six_nodes())
    assert chosen in {"gpu-0", "gpu-1"}


def test_cpu_only_coordinator_without_toleration_lands_in_cpu_zone() -> None:
    chosen, _ = run(pod("master"), six_nodes())
    assert chosen is not None and chosen.startswith("cpu-")


@pytest.mark.parametrize(
    ("nodes", "p", "existing", "expected_node", "message"),
    [
        # nodeSelector
        (
            [node("n1", zone="a"), node("n2", zone="b")],
            pod("p", nodeSelector={ZONE: "b"}),
            [],
            "n2",
            "",
        ),
        (
            [node("n1", zone="a")],
            pod("p", nodeSelector={ZONE: "z"}),
            [],
            None,
            "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.",
        ),
        # cordoned
        (
            [node("n1", unschedulable=True), node("n2", unschedulable=True)],
            pod("p"),
            [],
            None,
            "0/2 nodes are available: 2 node(s) were unschedulable.",
        ),
        # resources: cpu, memory, pods count; several reasons on one node
        (
            [node("n1", cpu="2", memory="1Gi")],
            pod("p", cpu="3", memory="2Gi"),
            [],
            None,
            "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory.",
        ),
        (
            [node("n1", cpu="4"), node("n2", cpu="4")],
            pod("p", cpu="2"),
            [pod("x", cpu="3", node_name="n1")],
            "n2",
            "",
        ),
        (
            [node("n1", pods=1)],
            pod("p"),
            [pod("x", node_name="n1")],
            None,
            "0/1 nodes are available: 1 Too many pods.",
        ),
        # terminal pods free their resources
        (
            [node("n1", cpu="2")],
            pod("p", cpu="2"),
            [pod("x", cpu="2", node_name="n1", phase="Succeeded")],
            "n1",
            "",
        ),
        # NoExecute taints filter too; PreferNoSchedule does not
        (
            [node("n1", taints=[{"key": "k", "value": "v", "effect": "NoExecute"}])],
            pod("p"),
            [],
            None,
            "0/1 nodes are available: 1 node(s) had untolerated taint {k: v}.",
        ),
        (
            [node("n1", taints=[{"key": "k", "value": "v", "effect": "PreferNoSchedule"}])],
            pod("p"),
            [],
            "n1",
            "",
        ),
    ],
)
def test_filters(
    nodes: list[dict[str, Any]],
    p: dict[str, Any],
    existing: list[dict[str, Any]],
    expected_node: str | None,
    message: str,
) -> None:
    chosen, text = run(p, nodes, existing)
    assert chosen == expected_node
    assert text == message


def _pod_affinity(
    kind: str, labels: dict[str, str], key: str = ZONE, **extra: Any
) -> dict[str, Any]:
    term = {"topologyKey": key, "labelSelector": {"matchLabels": labels}, **extra}
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def test_pod_affinity_follows_the_existing_pod_zone() -> None:
    nodes = [node("a1", zone="a"), node("b1", zone="b"), node("b2", zone="b")]
    existing = [pod("m", labels={"job": "j"}, node_name="a1")]
    p = pod("w", labels={"job": "j"}, affinity=_pod_affinity("podAffinity", {"job": "j"}))
    for seed in range(10):
        assert run(p, nodes, existing, seed=seed)[0] == "a1"


def test_pod_affinity_without_a_match_fails_with_the_upstream_reason() -> None:
    nodes = [node("a1", zone="a")]
    p = pod("w", labels={"job": "j"}, affinity=_pod_affinity("podAffinity", {"job": "other"}))
    assert run(p, nodes) == (
        None,
        "0/1 nodes are available: 1 node(s) didn't match pod affinity rules.",
    )


def test_self_affinity_first_pod_of_a_group_goes_anywhere() -> None:
    nodes = [node("a1", zone="a"), node("b1", zone="b")]
    p = pod("w", labels={"job": "j"}, affinity=_pod_affinity("podAffinity", {"job": "j"}))
    chosen = {run(p, nodes, seed=s)[0] for s in range(20)}
    assert chosen == {"a1", "b1"}


def test_self_affinity_needs_the_topology_key_on_the_node() -> None:
    nodes = [node("a1", zone="a")]
    p = pod(
        "w", labels={"job": "j"}, affinity=_pod_affinity("podAffinity", {"job": "j"}, key="rack")
    )
    assert run(p, nodes)[0] is None


def test_pod_affinity_namespaces_and_namespace_selector() -> None:
    nodes = [node("a1", zone="a"), node("b1", zone="b")]
    existing = [
        pod("m", namespace="team", labels={"job": "j"}, node_name="b1", cpu="0", memory="0")
    ]
    same_ns = pod("w", labels={"job": "j"}, affinity=_pod_affinity("podAffinity", {"job": "j"}))
    # the term defaults to the pod's own namespace: the pod in `team` does not count, and the
    # incoming pod matches its own term, so the first-pod rule lets it go anywhere
    assert {run(same_ns, nodes, existing, seed=s)[0] for s in range(20)} == {"a1", "b1"}
    listed = pod("w", affinity=_pod_affinity("podAffinity", {"job": "j"}, namespaces=["team"]))
    assert run(listed, nodes, existing)[0] == "b1"
    by_selector = pod(
        "w",
        affinity=_pod_affinity(
            "podAffinity", {"job": "j"}, namespaceSelector={"matchLabels": {"tier": "ml"}}
        ),
    )
    namespaces = [{"metadata": {"name": "team", "labels": {"tier": "ml"}}}]
    assert run(by_selector, nodes, existing, namespaces=namespaces)[0] == "b1"


def test_match_label_keys_in_pod_affinity() -> None:
    nodes = [node("a1", zone="a"), node("b1", zone="b")]
    existing = [
        pod("old", labels={"app": "x", "rev": "1"}, node_name="a1"),
        pod("new", labels={"app": "x", "rev": "2"}, node_name="b1"),
    ]
    p = pod(
        "p",
        labels={"app": "x", "rev": "2"},
        affinity=_pod_affinity("podAffinity", {"app": "x"}, matchLabelKeys=["rev"]),
    )
    assert run(p, nodes, existing)[0] == "b1"


def test_pod_anti_affinity_and_existing_anti_affinity() -> None:
    nodes = [node("a1", zone="a"), node("b1", zone="b")]
    existing = [pod("m", labels={"app": "db"}, node_name="a1")]
    p = pod("p", labels={"app": "db"}, affinity=_pod_affinity("podAntiAffinity", {"app": "db"}))
    assert run(p, nodes, existing)[0] == "b1"
    only_a = [nodes[0]]
    assert run(p, only_a, existing) == (
        None,
        "0/1 nodes are available: 1 node(s) didn't match pod anti-affinity rules.",
    )
    guarded = [
        pod(
            "m",
            labels={"app": "db"},
            node_name="a1",
            affinity=_pod_affinity("podAntiAffinity", {"app": "web"}),
        )
    ]
    web = pod("w", labels={"app": "web"})
    assert run(web, only_a, guarded) == (
        None,
        "0/1 nodes are available: 1 node(s) didn't satisfy existing pods anti-affinity rules.",
    )


def _spread(key: str = ZONE, when: str = "DoNotSchedule", **extra: Any) -> list[dict[str, Any]]:
    return [
        {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": when,
            "labelSelector": {"matchLabels": {"job": "j"}},
            **extra,
        }
    ]


def test_zone_spread_constraint_spreads_pods_across_zones() -> None:
    nodes = [
        node("a1", zone="a", cpu="64"),
        node("b1", zone="b", cpu="64"),
        node("c1", zone="c", cpu="64"),
    ]
    snapshot = Snapshot.build(nodes, [])
    rng = random.Random(3)
    for i in range(6):
        p = pod(f"w{i}", labels={"job": "j"}, topologySpreadConstraints=_spread())
        decision = schedule(p, snapshot, rng)
        assert decision.node is not None
        snapshot.assume({**p, "spec": {**p["spec"], "nodeName": decision.node}}, decision.node)
    zones = Counter(n for n, pods in snapshot.pods_by_node.items() for _ in pods)
    assert zones == {"a1": 2, "b1": 2, "c1": 2}


def test_spread_refuses_the_crowded_zone_with_the_upstream_reason() -> None:
    nodes = [node("a1", zone="a"), node("b1", zone="b", cpu="1")]
    existing = [pod("x", labels={"job": "j"}, node_name="a1")]
    p = pod("p", labels={"job": "j"}, topologySpreadConstraints=_spread())
    # b1 is too small, a1 would make skew 2
    assert run(p, nodes, [*existing, pod("fill", cpu="1", node_name="b1")]) == (
        None,
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match pod topology spread constraints.",
    )


def test_spread_min_domains_and_missing_label() -> None:
    nodes = [node("a1", zone="a")]
    existing = [pod("x", labels={"job": "j"}, node_name="a1")]
    p = pod("p", labels={"job": "j"}, topologySpreadConstraints=_spread(minDomains=1))
    assert run(p, nodes, existing)[0] == "a1"  # one domain: skew is 0
    strict = pod("p", labels={"job": "j"}, topologySpreadConstraints=_spread(minDomains=2))
    assert run(strict, nodes, existing)[0] is None  # fewer domains than minDomains: min is 0
    keyless = pod("p", labels={"job": "j"}, topologySpreadConstraints=_spread(key="rack"))
    assert run(keyless, nodes) == (
        None,
        "0/1 nodes are available: 1 node(s) didn't match pod topology spread constraints (missing required label).",
    )


def test_spread_node_policies() -> None:
    nodes = [node("a1", zone="a"), node("b1", zone="b", taints=[GPU_TAINT])]
    existing = [pod("x", labels={"job": "j"}, node_name="a1")]
    # nodeTaintsPolicy Ignore (default): tainted b1 counts as an empty domain, so a1 is refused
    p = pod("p", labels={"job": "j"}, topologySpreadConstraints=_spread())
    assert run(p, nodes, existing)[0] is None
    honor = pod(
        "p", labels={"job": "j"}, topologySpreadConstraints=_spread(nodeTaintsPolicy="Honor")
    )
    assert run(honor, nodes, existing)[0] == "a1"
    # nodeAffinityPolicy Honor (default) leaves out nodes the pod cannot select
    pinned = pod(
        "p", labels={"job": "j"}, nodeSelector={ZONE: "a"}, topologySpreadConstraints=_spread()
    )
    assert run(pinned, [node("a1", zone="a"), node("b1", zone="b")], existing)[0] == "a1"
    ignore = pod(
        "p",
        labels={"job": "j"},
        nodeSelector={ZONE: "a"},
        topologySpreadConstraints=_spread(nodeAffinityPolicy="Ignore"),
    )
    assert run(ignore, [node("a1", zone="a"), node("b1", zone="b")], existing)[0] is None


def test_spread_match_label_keys() -> None:
    nodes = [node("a1", zone="a"), node("b1", zone="b")]
    existing = [pod("x", labels={"job": "j", "rev": "1"}, node_name="a1", cpu="0", memory="0")]
    p = pod(
        "p",
        labels={"job": "j", "rev": "2"},
        topologySpreadConstraints=_spread(matchLabelKeys=["rev"]),
    )
    assert {run(p, nodes, existing, seed=s)[0] for s in range(20)} == {"a1", "b1"}


# --- scores ------------------------------------------------------------------------------------


def test_least_allocated_prefers_the_emptier_node() -> None:
    nodes = [node("n1"), node("n2")]
    existing = [pod("x", cpu="6", memory="24Gi", node_name="n1")]
    assert {run(pod("p"), nodes, existing, seed=s)[0] for s in range(10)} == {"n2"}


def test_preferred_node_affinity_weight() -> None:
    nodes = [node("n1", labels={"disk": "ssd"}), node("n2")]
    pref = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 50,
                    "preference": {
                        "matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]
                    },
                }
            ]
        }
    }
    assert {run(pod("p", affinity=pref), nodes, seed=s)[0] for s in range(10)} == {"n1"}


def test_preferred_pod_affinity_weight() -> None:
    nodes = [node("a1", zone="a"), node("b1", zone="b")]
    existing = [pod("m", labels={"job": "j"}, node_name="b1", cpu="1")]
    pref = {
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": ZONE,
                        "labelSelector": {"matchLabels": {"job": "j"}},
                    },
                }
            ]
        }
    }
    assert {run(pod("p", affinity=pref), nodes, existing, seed=s)[0] for s in range(10)} == {"b1"}


def test_schedule_anyway_spread_prefers_the_emptier_zone() -> None:
    nodes = [node("a1", zone="a"), node("b1", zone="b")]
    existing = [pod("x", labels={"job": "j"}, node_name="a1", cpu="0", memory="0")]
    p = pod(
        "p",
        labels={"job": "j"},
        cpu="0",
        memory="0",
        topologySpreadConstraints=_spread(when="ScheduleAnyway"),
    )
    assert {run(p, nodes, existing, seed=s)[0] for s in range(10)} == {"b1"}


def test_prefer_no_schedule_taint_scores_lower() -> None:
    nodes = [
        node("n1", taints=[{"key": "k", "value": "v", "effect": "PreferNoSchedule"}]),
        node("n2"),
    ]
    assert {run(pod("p"), nodes, seed=s)[0] for s in range(10)} == {"n2"}


def test_ties_are_broken_by_the_seed_reproducibly() -> None:
    nodes = [node(f"n{i}") for i in range(5)]
    first = [run(pod("p"), nodes, seed=s)[0] for s in range(8)]
    again = [run(pod("p"), nodes, seed=s)[0] for s in range(8)]
    assert first == again
    assert len(set(first)) > 1
