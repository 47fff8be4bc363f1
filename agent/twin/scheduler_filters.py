"""kube-scheduler's filter plugins, as the twin runs them: does a pod fit on a node, and if not, why.

Called by `scheduler_cycle.schedule` once per (pod, node). `prefilter` computes the per-pod state
(spread counts, inter-pod affinity counts) once per cycle, like upstream PreFilter. Plugins run in
upstream order (NodeUnschedulable, NodeName, TaintToleration, NodeAffinity, NodeResourcesFit,
PodTopologySpread, InterPodAffinity) and the first failing plugin's reasons are the node's reasons,
worded as kube-scheduler words them. Pure. It does not score, bind or preempt.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.model.scheduling import (
    PodAffinityTerm,
    resolve_pod_affinity_term,
    with_match_label_keys,
)
from agent.model.scheduling import pod_affinity_terms as scheduling_terms
from agent.model.selector import LabelSelector
from agent.twin.scheduler_resources import PODS, pod_requests
from agent.twin.scheduler_snapshot import Snapshot, name_of, namespace_of
from agent.twin.scheduler_terms import (
    node_labels,
    node_matches_required_affinity,
    parse_selector,
    pod_labels,
    selector_matches,
    untolerated_taint,
)

Obj = Mapping[str, Any]
Pair = tuple[str, str]

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
REASON_UNSCHEDULABLE = "node(s) were unschedulable"
REASON_NODE_NAME = "node(s) didn't match the requested node name"
REASON_NODE_AFFINITY = "node(s) didn't match Pod's node affinity/selector"
REASON_SPREAD = "node(s) didn't match pod topology spread constraints"
REASON_SPREAD_LABEL = (
    "node(s) didn't match pod topology spread constraints (missing required label)"
)
REASON_AFFINITY = "node(s) didn't match pod affinity rules"
REASON_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
REASON_EXISTING_ANTI = "node(s) didn't satisfy existing pods anti-affinity rules"
REASON_TOO_MANY_PODS = "Too many pods"


def taint_reason(taint: Obj) -> str:
    return f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value', '')}}}"


# --- pod (anti-)affinity terms -------------------------------------------------------------


def resolve_term(
    term: Obj, owner: Obj, namespace_labels: Mapping[str, Mapping[str, str]]
) -> PodAffinityTerm:
    """A PodAffinityTerm of `owner` resolved by the core's rules, with the cached selector parser."""
    return resolve_pod_affinity_term(
        term, namespace=namespace_of(owner), labels=pod_labels(owner),
        namespace_labels=namespace_labels, parse=parse_selector,
    )  # fmt: skip


def term_matches(term: PodAffinityTerm, pod: Obj) -> bool:
    return term.matches(namespace_of(pod), pod_labels(pod))


def pod_affinity_terms(pod: Obj, kind: str, mode: str) -> list[Obj]:
    return scheduling_terms(pod.get("spec") or {}, kind, mode)


def required_terms(
    pod: Obj, kind: str, namespace_labels: Mapping[str, Mapping[str, str]]
) -> list[PodAffinityTerm]:
    return [
        resolve_term(t, pod, namespace_labels)
        for t in pod_affinity_terms(pod, kind, "requiredDuringSchedulingIgnoredDuringExecution")
    ]


# --- per-pod state ---------------------------------------------------------------------------


@dataclass
class SpreadConstraint:
    topology_key: str
    max_skew: int
    selector: LabelSelector | None
    self_match: int
    counts: dict[str, int] = field(default_factory=dict)
    min_match: int = 0


@dataclass
class FilterState:
    """What upstream PreFilter computes once per pod."""

    requests: dict[str, int]
    spread: list[SpreadConstraint]
    spread_keys: list[str]
    affinity: list[PodAffinityTerm]
    anti_affinity: list[PodAffinityTerm]
    affinity_counts: dict[Pair, int]
    anti_counts: dict[Pair, int]
    existing_anti: set[Pair]


def spread_constraints_of(pod: Obj, when: str) -> list[Obj]:
    return [
        c
        for c in (pod.get("spec") or {}).get("topologySpreadConstraints") or []
        if (c.get("whenUnsatisfiable") or "DoNotSchedule") == when
    ]


def spread_counts(
    pod: Obj, snapshot: Snapshot, constraints: list[Obj]
) -> tuple[list[SpreadConstraint], list[str]]:
    """Count the pods matching each constraint per topology domain over eligible nodes."""
    labels = pod_labels(pod)
    keys = [str(c.get("topologyKey", "")) for c in constraints]
    out: list[SpreadConstraint] = []
    for c in constraints:
        selector = parse_selector(
            with_match_label_keys(c.get("labelSelector"), c.get("matchLabelKeys"), labels)
        )
        out.append(
            SpreadConstraint(
                topology_key=str(c.get("topologyKey", "")),
                max_skew=int(c.get("maxSkew", 1)),
                selector=selector,
                self_match=1 if selector_matches(selector, labels) else 0,
            )
        )
    ns = namespace_of(pod)
    for node in snapshot.nodes:
        nl = node_labels(node)
        if not all(k in nl for k in keys):
            continue
        for raw, sc in zip(constraints, out, strict=True):
            if (raw.get("nodeAffinityPolicy") or "Honor") == "Honor" and not (
                node_matches_required_affinity(pod, node)
            ):
                continue
            if (raw.get("nodeTaintsPolicy") or "Ignore") == "Honor" and untolerated_taint(
                pod, node
            ) is not None:
                continue
            domain = nl[sc.topology_key]
            count = sum(
                1
                for p in snapshot.pods_on(name_of(node))
                if namespace_of(p) == ns
                and not (p.get("metadata") or {}).get("deletionTimestamp")
                and selector_matches(sc.selector, pod_labels(p))
            )
            sc.counts[domain] = sc.counts.get(domain, 0) + count
    for raw, sc in zip(constraints, out, strict=True):
        min_domains = int(raw.get("minDomains") or 1)
        if not sc.counts or len(sc.counts) < min_domains:
            sc.min_match = 0
        else:
            sc.min_match = min(sc.counts.values())
    return out, keys


def prefilter(pod: Obj, snapshot: Snapshot) -> FilterState:
    ns_labels = snapshot.namespace_labels
    spread, keys = spread_counts(pod, snapshot, spread_constraints_of(pod, "DoNotSchedule"))
    affinity = required_terms(pod, "podAffinity", ns_labels)
    anti = required_terms(pod, "podAntiAffinity", ns_labels)
    affinity_counts: dict[Pair, int] = {}
    anti_counts: dict[Pair, int] = {}
    existing_anti: set[Pair] = set()
    for node, other in snapshot.all_pods():
        nl = node_labels(node)
        for term in affinity:
            if term.topology_key in nl and term_matches(term, other):
                pair = (term.topology_key, nl[term.topology_key])
                affinity_counts[pair] = affinity_counts.get(pair, 0) + 1
        for term in anti:
            if term.topology_key in nl and term_matches(term, other):
                pair = (term.topology_key, nl[term.topology_key])
                anti_counts[pair] = anti_counts.get(pair, 0) + 1
        for term in required_terms(other, "podAntiAffinity", ns_labels):
            if term.topology_key in nl and term_matches(term, pod):
                existing_anti.add((term.topology_key, nl[term.topology_key]))
    return FilterState(
        requests=pod_requests(pod),
        spread=spread,
        spread_keys=keys,
        affinity=affinity,
        anti_affinity=anti,
        affinity_counts=affinity_counts,
        anti_counts=anti_counts,
        existing_anti=existing_anti,
    )


# --- the plugins -----------------------------------------------------------------------------


def filter_node_unschedulable(pod: Obj, node: Obj) -> list[str]:
    if not (node.get("spec") or {}).get("unschedulable"):
        return []
    taint = {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
    tolerated = untolerated_taint(pod, {"spec": {"taints": [taint]}}) is None
    return [] if tolerated else [REASON_UNSCHEDULABLE]


def filter_node_name(pod: Obj, node: Obj) -> list[str]:
    wanted = (pod.get("spec") or {}).get("nodeName")
    return [REASON_NODE_NAME] if wanted and wanted != name_of(node) else []


def filter_taints(pod: Obj, node: Obj) -> list[str]:
    taint = untolerated_taint(pod, node)
    return [taint_reason(taint)] if taint is not None else []


def filter_node_affinity(pod: Obj, node: Obj) -> list[str]:
    return [] if node_matches_required_affinity(pod, node) else [REASON_NODE_AFFINITY]


def filter_resources(state: FilterState, node: Obj, snapshot: Snapshot) -> list[str]:
    allocatable = snapshot.allocatable(node)
    used = snapshot.requested(name_of(node))
    reasons: list[str] = []
    if used.get(PODS, 0) + 1 > allocatable.get(PODS, 110):
        reasons.append(REASON_TOO_MANY_PODS)
    for res in sorted(state.requests):
        want = state.requests[res]
        if res == PODS or want == 0:
            continue
        if used.get(res, 0) + want > allocatable.get(res, 0):
            reasons.append(f"Insufficient {res}")
    return reasons


def filter_spread(state: FilterState, node: Obj) -> list[str]:
    nl = node_labels(node)
    for sc in state.spread:
        if sc.topology_key not in nl:
            return [REASON_SPREAD_LABEL]
        domain = nl[sc.topology_key]
        if sc.counts.get(domain, 0) + sc.self_match - sc.min_match > sc.max_skew:
            return [REASON_SPREAD]
    return []


def filter_inter_pod_affinity(pod: Obj, state: FilterState, node: Obj) -> list[str]:
    nl = node_labels(node)
    if state.affinity:
        pods_exist = True
        for term in state.affinity:
            if term.topology_key not in nl:
                return [REASON_AFFINITY]
            if state.affinity_counts.get((term.topology_key, nl[term.topology_key]), 0) <= 0:
                pods_exist = False
        if not pods_exist:
            # The first pod of a group with affinity to itself may go anywhere (upstream rule):
            # no pod in the cluster matches any term, and the pod matches all its own terms.
            first_of_group = not state.affinity_counts and all(
                term_matches(t, pod) for t in state.affinity
            )
            if not first_of_group:
                return [REASON_AFFINITY]
    for term in state.anti_affinity:
        if (
            term.topology_key in nl
            and state.anti_counts.get((term.topology_key, nl[term.topology_key]), 0) > 0
        ):
            return [REASON_ANTI_AFFINITY]
    for key, value in state.existing_anti:
        if nl.get(key) == value:
            return [REASON_EXISTING_ANTI]
    return []


def run_filters(pod: Obj, node: Obj, state: FilterState, snapshot: Snapshot) -> list[str]:
    """The reasons `node` is refused (first failing plugin), or [] when the pod fits."""
    return (
        filter_node_unschedulable(pod, node)
        or filter_node_name(pod, node)
        or filter_taints(pod, node)
        or filter_node_affinity(pod, node)
        or filter_resources(state, node, snapshot)
        or filter_spread(state, node)
        or filter_inter_pod_affinity(pod, state, node)
    )
