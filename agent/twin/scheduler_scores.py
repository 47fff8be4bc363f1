"""kube-scheduler's score plugins, as the twin runs them: rank the nodes a pod fits on.

Called by `scheduler_cycle.schedule` with the feasible nodes. Each plugin scores every node, is
normalised to 0-100 like upstream NormalizeScore, and is weighted with the default profile weights
(NodeResourcesFit least-allocated 1, NodeResourcesBalancedAllocation 1, NodeAffinity 2,
InterPodAffinity 2, PodTopologySpread 2, TaintToleration 3). Pure. Ties are not broken here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from agent.model.scheduling import node_selector_term_matches
from agent.twin.scheduler_filters import (
    FilterState,
    pod_affinity_terms,
    resolve_term,
    spread_constraints_of,
    spread_counts,
    term_matches,
)
from agent.twin.scheduler_resources import CPU, MEMORY
from agent.twin.scheduler_snapshot import Snapshot, name_of
from agent.twin.scheduler_terms import node_labels, untolerated_taint

Obj = Mapping[str, Any]
MAX_SCORE = 100

WEIGHTS = {
    "NodeResourcesFit": 1,
    "NodeResourcesBalancedAllocation": 1,
    "NodeAffinity": 2,
    "InterPodAffinity": 2,
    "PodTopologySpread": 2,
    "TaintToleration": 3,
}


def _fractions(state: FilterState, node: Obj, snapshot: Snapshot) -> list[float]:
    allocatable = snapshot.allocatable(node)
    used = snapshot.requested(name_of(node))
    out = []
    for res in (CPU, MEMORY):
        cap = allocatable.get(res, 0)
        if cap <= 0:
            continue
        out.append(min(1.0, (used.get(res, 0) + state.requests.get(res, 0)) / cap))
    return out


def score_least_allocated(state: FilterState, node: Obj, snapshot: Snapshot) -> float:
    fractions = _fractions(state, node, snapshot)
    if not fractions:
        return 0.0
    return sum((1 - f) * MAX_SCORE for f in fractions) / len(fractions)


def score_balanced(state: FilterState, node: Obj, snapshot: Snapshot) -> float:
    fractions = _fractions(state, node, snapshot)
    if len(fractions) < 2:
        return float(MAX_SCORE)
    mean = sum(fractions) / len(fractions)
    std = math.sqrt(sum((f - mean) ** 2 for f in fractions) / len(fractions))
    return (1 - std) * MAX_SCORE


def score_node_affinity(pod: Obj, node: Obj) -> float:
    preferred = (((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution"
    ) or []
    labels = node_labels(node)
    return float(
        sum(
            int(p.get("weight", 0))
            for p in preferred
            if node_selector_term_matches(p.get("preference") or {}, labels, name_of(node))
        )
    )


def score_inter_pod_affinity(pod: Obj, node: Obj, snapshot: Snapshot) -> float:
    labels = node_labels(node)
    total = 0.0
    for kind, sign in (("podAffinity", 1), ("podAntiAffinity", -1)):
        for weighted in pod_affinity_terms(
            pod, kind, "preferredDuringSchedulingIgnoredDuringExecution"
        ):
            term = resolve_term(
                weighted.get("podAffinityTerm") or {}, pod, snapshot.namespace_labels
            )
            if term.topology_key not in labels:
                continue
            value = labels[term.topology_key]
            for other_node, other in snapshot.all_pods():
                if node_labels(other_node).get(term.topology_key) == value and term_matches(term, other):
                    total += sign * int(weighted.get("weight", 0))
    return total


def score_taints(pod: Obj, node: Obj) -> float:
    """Count of untolerated PreferNoSchedule taints (fewer is better; reversed on normalising)."""
    count = 0
    taints = list((node.get("spec") or {}).get("taints") or [])
    for taint in taints:
        if taint.get("effect") != "PreferNoSchedule":
            continue
        if untolerated_taint(pod, {"spec": {"taints": [taint]}}, effects=("PreferNoSchedule",)):
            count += 1
    return float(count)


def spread_scores(pod: Obj, nodes: list[Obj], snapshot: Snapshot) -> list[float]:
    """ScheduleAnyway constraints: matching pods in the node's domain, weighted like upstream."""
    constraints = spread_constraints_of(pod, "ScheduleAnyway")
    if not constraints:
        return [0.0 for _ in nodes]
    counted, _ = spread_counts(pod, snapshot, constraints)
    out = []
    for node in nodes:
        labels = node_labels(node)
        score = 0.0
        for sc in counted:
            if sc.topology_key in labels:
                weight = math.log(len(sc.counts) + 2)
                score += (sc.counts.get(labels[sc.topology_key], 0) + sc.self_match) * weight
        out.append(score)
    return out


def _normalise(raw: list[float], *, reverse: bool = False) -> list[float]:
    if not raw:
        return []
    low, high = min(raw), max(raw)
    if high == low:
        return [float(MAX_SCORE) if reverse or high != 0 else 0.0 for _ in raw]
    if reverse:
        return [(high - r) * MAX_SCORE / (high - low) for r in raw]
    return [(r - low) * MAX_SCORE / (high - low) for r in raw]


def score_nodes(pod: Obj, nodes: list[Obj], state: FilterState, snapshot: Snapshot) -> list[float]:
    """Weighted sum of every plugin's normalised score, one per node, in `nodes` order."""
    plugins: dict[str, list[float]] = {
        "NodeResourcesFit": [score_least_allocated(state, n, snapshot) for n in nodes],
        "NodeResourcesBalancedAllocation": [score_balanced(state, n, snapshot) for n in nodes],
        "NodeAffinity": _normalise([score_node_affinity(pod, n) for n in nodes]),
        "InterPodAffinity": _normalise([score_inter_pod_affinity(pod, n, snapshot) for n in nodes]),
        "PodTopologySpread": _normalise(spread_scores(pod, nodes, snapshot), reverse=True),
        "TaintToleration": _normalise([score_taints(pod, n) for n in nodes], reverse=True),
    }
    return [
        sum(WEIGHTS[name] * scores[i] for name, scores in plugins.items())
        for i in range(len(nodes))
    ]
