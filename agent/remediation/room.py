"""Does a zone have room for a job's pods, judged as kube-scheduler's filters would judge them.

Called by `agent.remediation.template.require_room` (for the family planners) before a plan
proposes any write, with the pods the plan will (re)create as they will be after the patch
(`PodNeed`: requests, nodeSelector, tolerations, affinity, labels, namespace). Pure: plain dicts in, plain data out; it does not schedule anything.

A pod fits on a node of the zone when, in this order:
- the node is schedulable (not cordoned);
- the node matches the pod's nodeSelector and its required node affinity
  (`nodeSelectorTerms` ORed, requirements ANDed, In/NotIn/Exists/DoesNotExist/Gt/Lt,
  `matchFields` on `metadata.name`, an empty term or term list matching nothing: the rules of
  `agent.model.scheduling`, which the twin's scheduler shares); preferred terms do not count;
- the pod tolerates the node's NoSchedule/NoExecute taints;
- free resources suffice: allocatable minus the requests of the live pods bound there (pods the
  plan replaces do not count); every requested resource counts (cpu, memory, `nvidia.com/gpu`,
  any extended resource), plus one `pods` slot when the node declares a pod limit;
- required pod affinity: every term's topologyKey is on the node and a pod the term selects sits
  in the node's domain; or, as upstream, no pod matches any term and the pod matches all its own
  terms (the first pod of a group, e.g. the plan's own job-name term on the zone key);
- required pod anti-affinity both ways: no pod the pod's own terms select sits in the node's
  domain of the term's topologyKey, and no pod whose terms select this pod sits in its term's
  domain holding the node (the symmetric rule).
The pods seen by (anti-)affinity are the live pods in `bound_pods` (except those the plan
replaces) and the plan's pods packed earlier in the same check. Terms select pods by labelSelector
(absent: none), matchLabelKeys/mismatchLabelKeys, and namespaces: the listed ones, the pod's own
when none is listed and no namespaceSelector is set, every namespace for `namespaceSelector: {}`.
Pods are packed first fit, largest GPU request first, onto the nodes in the given order.

The refusal names the first pod that fits nowhere and each node's reason; its first words say
why when every node refuses for one reason ("no node in zone Z matches the node affinity/selector
of pod P", "anti-affinity: no node in zone Z may take pod P", "pod affinity: ..."), else "zone Z
has no room for pod P (its requests)".

Not checked: a non-empty `namespaceSelector` is not resolved (namespace labels are not read): it is
taken to select every namespace (a refusal says so), which may refuse a zone the scheduler would
accept for anti-affinity and accept one it would refuse for pod affinity. Only pods in
`bound_pods` are seen (the caller reads the target zone's nodes): a pod elsewhere that shares a
topology domain spanning zones, or that would deny the first-of-group exception of pod affinity,
is not. topologySpreadConstraints other than the zone-keyed DoNotSchedule one the plan refuses,
preferred terms, preemption, volume topology, host ports, and a rollout's surge (old pods still
running) are not modelled; the scheduler's own order of pods and scoring may differ from first fit.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from agent.model.scheduling import (
    PodAffinityTerm,
    node_affinity_matches,
    node_selector_matches,
    pod_affinity_terms,
    resolve_pod_affinity_term,
)

GPU_RESOURCE = "nvidia.com/gpu"
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})

_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")
_SUFFIX = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}


class QuantityError(ValueError):
    """A resource quantity that is not a Kubernetes quantity."""


def parse_quantity(value: object) -> Decimal:
    """A Kubernetes quantity (`500m`, `32Gi`, `1e3`, 4) as a Decimal (a text is parsed once:
    the same few quantities recur in every template and node)."""
    if isinstance(value, bool):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        return Decimal(str(value))
    if type(value) is str:
        return _parse_text(value)
    return _parse(value)


@functools.lru_cache(maxsize=4096)
def _parse_text(value: str) -> Decimal:
    return _parse(value)


def _parse(value: object) -> Decimal:
    match = _QUANTITY.match(str(value).strip())
    if match is None or match.group(2) not in _SUFFIX:
        raise QuantityError(f"not a quantity: {value!r}")
    try:
        return Decimal(match.group(1)) * _SUFFIX[match.group(2)]
    except InvalidOperation:
        raise QuantityError(f"not a quantity: {value!r}") from None


def pod_spec_requests(spec: Mapping[str, Any]) -> dict[str, Decimal]:
    """Effective requests of a pod spec: the containers' sum, or an init container's larger need.

    A container's limit stands in for a missing request (as the API server defaults it).
    """

    def one(container: Mapping[str, Any]) -> dict[str, Decimal]:
        resources = container.get("resources") or {}
        wanted = dict(resources.get("limits") or {})
        wanted.update(resources.get("requests") or {})
        return {str(k): parse_quantity(v) for k, v in wanted.items()}

    total: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        for name, amount in one(container).items():
            total[name] = total.get(name, Decimal(0)) + amount
    for container in spec.get("initContainers") or []:
        for name, amount in one(container).items():
            total[name] = max(total.get(name, Decimal(0)), amount)
    return total


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """Whether some toleration tolerates the taint (Kubernetes' matching rules)."""
    for tol in tolerations:
        effect = tol.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        operator = tol.get("operator") or "Equal"
        key = tol.get("key") or ""
        if not key:
            if operator == "Exists":
                return True
            continue
        if key != taint.get("key"):
            continue
        if operator == "Exists" or (tol.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def blocking_taints(node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The node's taints that keep pods without a matching toleration off it."""
    taints = (node.get("spec") or {}).get("taints") or []
    return [t for t in taints if t.get("effect") in BLOCKING_EFFECTS]


def node_labels(node: Mapping[str, Any]) -> Mapping[str, str]:
    labels: Mapping[str, str] = (node.get("metadata") or {}).get("labels") or {}
    return labels


def node_name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def schedulable(node: Mapping[str, Any]) -> bool:
    return not (node.get("spec") or {}).get("unschedulable")


@dataclass(frozen=True)
class PodNeed:
    """One pod the plan will (re)create, as it will be: what it requests and where it may go.

    `labels` and `namespace` are what other pods' (anti-)affinity terms see; `affinity` is the
    pod spec's `affinity` (required node affinity, pod affinity and anti-affinity are read).
    """

    name: str
    requests: Mapping[str, Decimal]
    node_selector: Mapping[str, str]
    tolerations: tuple[Mapping[str, Any], ...]
    namespace: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    affinity: Mapping[str, Any] = field(default_factory=dict)


def _fmt(resource: str, amount: Decimal) -> str:
    if resource == "memory" and amount >= 2**30:
        return f"{amount / Decimal(2**30):.4g}Gi"
    return f"{amount.normalize():f}"


def _short(left: Mapping[str, Decimal], resource: str, amount: Decimal) -> bool:
    """Whether a node lacks `amount` of `resource`. A resource the node does not declare is
    missing when it is cpu, memory or an extended resource (`vendor/name`), else unlimited."""
    if amount <= 0:
        return False
    if resource in left:
        return left[resource] < amount
    return resource in ("cpu", "memory") or "/" in resource


def could_hold(node: Mapping[str, Any], requests: Mapping[str, Decimal]) -> bool:
    """Whether the node's allocatable resources cover `requests` once nothing else runs there
    (kube-scheduler's resource fit on an empty node): a node that never could, e.g. a CPU node
    for a pod that asks for a GPU, accepts the pod whatever its taints say. An extended resource
    (`vendor/name`) the node does not declare is one it has none of (a CPU node lists no
    `nvidia.com/gpu`); cpu or memory it does not declare (a view that keeps only GPUs) does not
    limit it."""
    alloc = (node.get("status") or {}).get("allocatable") or {}
    have = {str(k): parse_quantity(v) for k, v in alloc.items()}
    for resource, amount in requests.items():
        if amount <= 0:
            continue
        if resource in have:
            if have[resource] < amount:
                return False
        elif "/" in resource:
            return False
    return True


def _describe(need: PodNeed) -> str:
    parts = [f"{k} {_fmt(k, v)}" for k, v in sorted(need.requests.items()) if v]
    return ", ".join(parts) or "no resources"


# ------------------------------------------------------------------------------------------------
# inter-pod affinity: who sits where, and what a pod's terms make of it


@dataclass(frozen=True)
class _Occupant:
    """A pod on a node, for inter-pod affinity: a live pod, or a pod of the plan placed earlier."""

    shown: str  # "pod ns/name" or "planned pod name"
    namespace: str
    labels: Mapping[str, str]
    node: str
    domains: Mapping[str, str]  # its node's labels
    anti: tuple[PodAffinityTerm, ...]  # its required anti-affinity terms, resolved


def _resolve(terms: Sequence[Mapping[str, Any]], *, namespace: str,
             labels: Mapping[str, str]) -> tuple[PodAffinityTerm, ...]:  # fmt: skip
    return tuple(
        resolve_pod_affinity_term(t, namespace=namespace, labels=labels, namespace_labels=None)
        for t in terms
    )


class _Terms:
    """The required podAffinity / podAntiAffinity terms of the needs of one check, resolved
    once per affinity object, kind, namespace and the values of the labels the terms read
    (matchLabelKeys, mismatchLabelKeys: a term reads no other label of its pod), so the pods of
    one template share theirs. The needs outlive the check: an affinity object's identity is not
    reused while it runs."""

    def __init__(self) -> None:
        self._raw: dict[tuple[int, str], tuple[list[Mapping[str, Any]], list[Any]]] = {}
        self._found: dict[tuple[object, ...], tuple[PodAffinityTerm, ...]] = {}

    def of(self, need: PodNeed, kind: str) -> tuple[PodAffinityTerm, ...]:
        raw = self._raw.get((id(need.affinity), kind))
        if raw is None:
            terms = pod_affinity_terms({"affinity": need.affinity}, kind)
            read = [k for t in terms for field in ("matchLabelKeys", "mismatchLabelKeys")
                    for k in t.get(field) or ()]  # fmt: skip
            raw = self._raw[(id(need.affinity), kind)] = (terms, read)
        terms, read = raw
        if not terms:
            return ()
        labels = need.labels
        key = (id(need.affinity), kind, need.namespace,
               tuple((k, k in labels, labels.get(k)) for k in read) if read else ())  # fmt: skip
        found = self._found.get(key)
        if found is None:
            found = self._found[key] = _resolve(terms, namespace=need.namespace, labels=labels)
        return found


def _occupants(
    bound_pods: Sequence[Mapping[str, Any]],
    nodes: Mapping[str, Mapping[str, Any]],
    replaced: frozenset[tuple[str, str]],
) -> list[_Occupant]:
    out: list[_Occupant] = []
    for pod in bound_pods:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        node = nodes.get(str(spec.get("nodeName") or ""))
        if node is None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        key = (str(meta.get("namespace")), str(meta.get("name")))
        if key in replaced:
            continue
        labels: Mapping[str, str] = meta.get("labels") or {}
        out.append(_Occupant(
            shown=f"pod {key[0]}/{key[1]}", namespace=key[0], labels=labels,
            node=node_name(node), domains=node_labels(node),
            anti=_resolve(pod_affinity_terms(spec, "podAntiAffinity"), namespace=key[0],
                          labels=labels),
        ))  # fmt: skip
    return out


def _ns_note(term: PodAffinityTerm) -> str:
    return " (its namespaceSelector taken as every namespace)" if term.unresolved else ""


@dataclass
class _InterPod:
    """What one pod's inter-pod terms make of the pods placed so far (upstream PreFilter):
    per own affinity term the matching pods per domain value, per own anti-affinity term a
    matching pod per domain value, and the domains other pods' anti-affinity keeps it out of."""

    affinity: list[tuple[PodAffinityTerm, dict[str, int]]]
    first_of_group: bool
    anti: list[tuple[PodAffinityTerm, dict[str, _Occupant]]]
    kept_out: dict[tuple[str, str], tuple[_Occupant, PodAffinityTerm]]

    @classmethod
    def of(cls, need: PodNeed, occupants: Sequence[_Occupant], terms: _Terms) -> _InterPod:
        affinity: list[tuple[PodAffinityTerm, dict[str, int]]] = [
            (t, {}) for t in terms.of(need, "podAffinity")
        ]
        anti: list[tuple[PodAffinityTerm, dict[str, _Occupant]]] = [
            (t, {}) for t in terms.of(need, "podAntiAffinity")
        ]
        kept_out: dict[tuple[str, str], tuple[_Occupant, PodAffinityTerm]] = {}
        any_match = False
        for occ in occupants:
            for term, counts in affinity:
                if term.topology_key in occ.domains and term.matches(occ.namespace, occ.labels):
                    value = occ.domains[term.topology_key]
                    counts[value] = counts.get(value, 0) + 1
                    any_match = True
            for term, hits in anti:
                if term.topology_key in occ.domains and term.matches(occ.namespace, occ.labels):
                    hits.setdefault(occ.domains[term.topology_key], occ)
            for term in occ.anti:
                if term.topology_key in occ.domains and term.matches(need.namespace, need.labels):
                    kept_out.setdefault((term.topology_key, occ.domains[term.topology_key]),
                                        (occ, term))  # fmt: skip
        # The first pod of a group with affinity to itself may go anywhere: no pod matches any
        # of its terms and it matches all of them itself (upstream rule).
        first = not any_match and all(
            t.matches(need.namespace, need.labels) for t, _ in affinity
        )
        return cls(affinity=affinity, first_of_group=first, anti=anti, kept_out=kept_out)

    def affinity_refusal(self, labels: Mapping[str, str]) -> str | None:
        for term, _ in self.affinity:
            if term.topology_key not in labels:
                return f"pod affinity: the node has no {term.topology_key} label"
        if self.first_of_group:
            return None
        for term, counts in self.affinity:
            value = labels[term.topology_key]
            if counts.get(value, 0) <= 0:
                return (f"pod affinity: no pod its term selects in {term.topology_key}={value}"
                        f"{_ns_note(term)}")  # fmt: skip
        return None

    def anti_refusal(self, labels: Mapping[str, str], need: PodNeed) -> str | None:
        for term, hits in self.anti:
            value = labels.get(term.topology_key)
            if value is not None and value in hits:
                return (f"anti-affinity: pod {need.name} may not share {term.topology_key}={value} "
                        f"with {hits[value].shown}{_ns_note(term)}")  # fmt: skip
        for (key, value), (occ, term) in self.kept_out.items():
            if labels.get(key) == value:
                return (f"anti-affinity of {occ.shown} (on {occ.node}) keeps pod {need.name} out "
                        f"of {key}={value}{_ns_note(term)}")  # fmt: skip
        return None


# ------------------------------------------------------------------------------------------------
# the check

NODE_AFFINITY = "node affinity"
POD_AFFINITY = "pod affinity"
ANTI_AFFINITY = "anti-affinity"
OTHER = "other"
MAX_NODES_SHOWN = 10  # per-node reasons quoted in a refusal; the rest are counted


def _headline(zone: str, need: PodNeed, kinds: set[str]) -> str:
    if kinds == {NODE_AFFINITY}:
        return f"no node in zone {zone} matches the node affinity/selector of pod {need.name}"
    if kinds == {ANTI_AFFINITY}:
        return f"anti-affinity: no node in zone {zone} may take pod {need.name}"
    if kinds == {POD_AFFINITY}:
        return f"pod affinity: no node in zone {zone} satisfies the pod affinity of pod {need.name}"
    return f"zone {zone} has no room for pod {need.name} ({_describe(need)})"


def _refusal(zone: str, need: PodNeed, refusals: Sequence[tuple[str, str]]) -> str:
    shown = [text for _, text in refusals[:MAX_NODES_SHOWN]]
    if len(refusals) > MAX_NODES_SHOWN:
        shown.append(f"{len(refusals) - MAX_NODES_SHOWN} more nodes refuse it too")
    return _headline(zone, need, {kind for kind, _ in refusals}) + ": " + "; ".join(shown)


def _placement_refusals(
    need: PodNeed, nodes: Sequence[tuple[Mapping[str, Any], str, Mapping[str, str]]]
) -> list[tuple[str, str] | None]:
    """Per node (the node, its name, its labels): why the need's nodeSelector, required node
    affinity or tolerations keep it off the node, or None (what depends on the need's placement
    alone, not on what is placed)."""
    placement = {"nodeSelector": need.node_selector, "affinity": need.affinity}
    out: list[tuple[str, str] | None] = []
    for node, name, labels in nodes:
        if not node_selector_matches(placement, labels):
            out.append((NODE_AFFINITY, f"{name}: nodeSelector does not match"))
        elif not node_affinity_matches(placement, labels, name):
            out.append((NODE_AFFINITY, f"{name}: required node affinity does not match"))
        else:
            untolerated = [t for t in blocking_taints(node) if not tolerates(need.tolerations, t)]
            out.append((OTHER, f"{name}: untolerated taint {untolerated[0].get('key')}")
                       if untolerated else None)  # fmt: skip
    return out


def check_room(
    needs: Sequence[PodNeed],
    *,
    zone: str,
    zone_label: str,
    nodes: Sequence[Mapping[str, Any]],
    bound_pods: Sequence[Mapping[str, Any]],
    replaced: frozenset[tuple[str, str]],
) -> str | None:
    """None when every need fits in `zone`; else the reason naming the first pod that does not.

    `bound_pods`: live pods on nodes (any namespace); `replaced`: (namespace, name) of the pods
    the plan deletes, whose requests are freed and which no (anti-)affinity term sees.
    """
    in_zone = [n for n in nodes if node_labels(n).get(zone_label) == zone]
    if not in_zone:
        return f"zone {zone} has no nodes"
    usable = [n for n in in_zone if schedulable(n)]
    if not usable:
        return f"every node of zone {zone} is cordoned (unschedulable)"
    free: dict[str, dict[str, Decimal]] = {}
    for node in usable:
        alloc = (node.get("status") or {}).get("allocatable") or {}
        free[node_name(node)] = {str(k): parse_quantity(v) for k, v in alloc.items()}
    for pod in bound_pods:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        where = spec.get("nodeName")
        if where not in free or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        if (str(meta.get("namespace")), str(meta.get("name"))) in replaced:
            continue
        left = free[where]
        for name, amount in pod_spec_requests(spec).items():
            if name in left:
                left[name] -= amount
        if "pods" in left:
            left["pods"] -= 1
    occupants = _occupants(bound_pods, {node_name(n): n for n in nodes}, replaced)
    order = sorted(
        needs,
        key=lambda n: (
            -n.requests.get(GPU_RESOURCE, Decimal(0)),
            -n.requests.get("cpu", Decimal(0)),
            -n.requests.get("memory", Decimal(0)),
            n.name,
        ),
    )
    terms = _Terms()
    named = [(node, node_name(node), node_labels(node)) for node in usable]
    # the needs of one template share their placement objects: judged once per node
    placed: dict[tuple[int, int, int], list[tuple[str, str] | None]] = {}
    for need in order:
        inter = _InterPod.of(need, occupants, terms)
        key = (id(need.node_selector), id(need.affinity), id(need.tolerations))
        fits = placed.get(key)
        if fits is None:
            fits = placed[key] = _placement_refusals(need, named)
        chosen: Mapping[str, Any] | None = None
        refusals: list[tuple[str, str]] = []
        for (node, name, labels), refused in zip(named, fits, strict=True):
            if refused is not None:
                refusals.append(refused)
                continue
            left = free[name]
            short = [r for r, amount in need.requests.items() if _short(left, r, amount)]
            if "pods" in left and left["pods"] < 1:
                short.append("pods")
            if short:
                refusals.append((OTHER, f"{name}: not enough {', '.join(sorted(short))}"))
                continue
            why = inter.affinity_refusal(labels)
            if why is not None:
                refusals.append((POD_AFFINITY, f"{name}: {why}"))
                continue
            why = inter.anti_refusal(labels, need)
            if why is not None:
                refusals.append((ANTI_AFFINITY, f"{name}: {why}"))
                continue
            chosen = node
            break
        if chosen is None:
            return _refusal(zone, need, refusals)
        left = free[node_name(chosen)]
        for r, amount in need.requests.items():
            if r in left:
                left[r] -= amount
        if "pods" in left:
            left["pods"] -= 1
        occupants.append(_Occupant(
            shown=f"planned pod {need.name}", namespace=need.namespace, labels=need.labels,
            node=node_name(chosen), domains=node_labels(chosen),
            anti=terms.of(need, "podAntiAffinity"),
        ))  # fmt: skip
    return None
