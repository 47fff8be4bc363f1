"""Placement terms as kube-scheduler reads them: required node affinity and pod (anti-)affinity terms.

Used by the remediation's room check (`agent.remediation.room`) and by the twin's scheduler, so that
both judge a pod spec the same way. Works on plain Kubernetes JSON (dicts). Pure: no I/O; it
answers "does this node / this pod match", it does not place anything.

Node affinity (as kube-scheduler's NodeAffinity filter matches it): `nodeSelector` pairs must all
hold, AND, when `affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution` is set, one of
its `nodeSelectorTerms` must match (terms ORed; an empty list matches no node). Inside a term its
`matchExpressions` and `matchFields` are ANDed; a term with neither matches no node. Operators: In,
NotIn, Exists, DoesNotExist, Gt, Lt (Gt/Lt compare the label value as a base-10 64-bit integer; a
label that is not one does not match). `matchFields` knows `metadata.name` with In/NotIn and
exactly one value. A term with an invalid requirement (unknown operator, In/NotIn without values,
Exists/DoesNotExist with values, Gt/Lt without exactly one integer) matches no node, while the
other terms still count, as upstream's lazy-error selector does. Label key and value syntax is the
API server's to check, not this module's.

Pod (anti-)affinity terms: a term selects pods by `labelSelector` (absent: no pod; `{}`: every pod)
with `matchLabelKeys` / `mismatchLabelKeys` folded in from the owner pod's labels, in the namespaces
the term names: `namespaces` united with what `namespaceSelector` selects; neither set means the
owner's own namespace; an empty `namespaceSelector` ({}) means every namespace. Resolving a
non-empty `namespaceSelector` needs the namespaces' labels; without them (None) it is taken to
select every namespace and the term says so (`unresolved`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.errors import PolicyError
from agent.model.selector import LabelSelector, parse_label_selector

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

Labels = Mapping[str, str]
Obj = Mapping[str, Any]
SelectorParser = Callable[[Obj | None], LabelSelector | None]

_GO_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)


def go_int(text: str) -> int | None:
    """`strconv.ParseInt(text, 10, 64)`: an optional sign and ASCII digits, in int64; else None."""
    if not _GO_INT.fullmatch(text):
        return None
    number = int(text)
    return number if INT64_MIN <= number <= INT64_MAX else None


# --- node affinity ------------------------------------------------------------------------------


def _requirement_valid(expr: Obj) -> bool:
    op = expr.get("operator")
    values = expr.get("values") or []
    if op in ("In", "NotIn"):
        return bool(values)
    if op in ("Exists", "DoesNotExist"):
        return not values
    if op in ("Gt", "Lt"):
        return len(values) == 1 and go_int(str(values[0])) is not None
    return False


def _requirement_matches(expr: Obj, labels: Labels) -> bool:
    """One valid NodeSelectorRequirement on node labels."""
    key = str(expr.get("key", ""))
    op = expr.get("operator")
    values = [str(v) for v in expr.get("values") or []]
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if key not in labels:
        return False
    if op == "In":
        return labels[key] in values
    have, want = go_int(labels[key]), go_int(values[0])
    if have is None or want is None:
        return False
    return have > want if op == "Gt" else have < want


def _field_valid(expr: Obj) -> bool:
    return expr.get("operator") in ("In", "NotIn") and len(expr.get("values") or []) == 1


def node_selector_term_matches(term: Obj, labels: Labels, node_name: str) -> bool:
    """One NodeSelectorTerm: matchExpressions AND matchFields; empty or invalid matches no node."""
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False
    if not all(_requirement_valid(e) for e in exprs):
        return False
    if not all(_field_valid(f) for f in fields):
        return False
    if not all(_requirement_matches(e, labels) for e in exprs):
        return False
    if not node_name:
        return True  # upstream skips the field selector for a node without a name
    node_fields = {"metadata.name": node_name}
    for f in fields:
        have = node_fields.get(str(f.get("key", "")), "")
        want = str((f.get("values") or [""])[0])
        if (have == want) != (f.get("operator") == "In"):
            return False
    return True


def required_node_selector(spec: Obj) -> Obj | None:
    """The pod spec's required node affinity NodeSelector, or None when it has none."""
    affinity = spec.get("affinity") or {}
    found: Obj | None = (affinity.get("nodeAffinity") or {}).get(REQUIRED)
    return found


def node_affinity_matches(spec: Obj, labels: Labels, node_name: str) -> bool:
    """Required node affinity alone (terms ORed); True when the spec sets none."""
    required = required_node_selector(spec)
    if required is None:
        return True
    terms = required.get("nodeSelectorTerms") or []
    return any(node_selector_term_matches(t, labels, node_name) for t in terms)


def node_selector_matches(spec: Obj, labels: Labels) -> bool:
    """The spec's `nodeSelector`: every pair equal on the node."""
    return all(labels.get(k) == v for k, v in (spec.get("nodeSelector") or {}).items())


def required_node_affinity_matches(spec: Obj, labels: Labels, node_name: str) -> bool:
    """`nodeSelector` AND required node affinity, as the NodeAffinity filter checks them."""
    return node_selector_matches(spec, labels) and node_affinity_matches(spec, labels, node_name)


# --- pod (anti-)affinity terms ------------------------------------------------------------------


def parse_selector_or_none(selector: Obj | None) -> LabelSelector | None:
    """A metav1.LabelSelector parsed; None for an absent or invalid one (it selects no pod)."""
    if selector is None:
        return None
    try:
        return parse_label_selector(selector, where="labelSelector")
    except PolicyError:
        return None


def with_match_label_keys(
    selector: Obj | None, keys: list[str] | None, pod_labels: Labels
) -> Obj | None:
    """Add `key In (pod's value)` for each matchLabelKeys key the pod carries (as upstream does)."""
    if not keys or selector is None:
        return selector
    extra = [
        {"key": k, "operator": "In", "values": [pod_labels[k]]} for k in keys if k in pod_labels
    ]
    merged = dict(selector)
    merged["matchExpressions"] = list(selector.get("matchExpressions") or []) + extra
    return merged


@dataclass(frozen=True)
class PodAffinityTerm:
    """A PodAffinityTerm resolved against its owner pod.

    `namespaces` None: every namespace. `unresolved`: a non-empty namespaceSelector was taken to
    select every namespace because the namespaces' labels were not known.
    """

    selector: LabelSelector | None  # None: selects no pod
    namespaces: frozenset[str] | None
    topology_key: str
    unresolved: bool = False

    def matches(self, namespace: str, labels: Labels) -> bool:
        if self.namespaces is not None and namespace not in self.namespaces:
            return False
        return self.selector is not None and self.selector.matches(labels)


def resolve_pod_affinity_term(
    term: Obj,
    *,
    namespace: str,
    labels: Labels,
    namespace_labels: Mapping[str, Labels] | None,
    parse: SelectorParser = parse_selector_or_none,
) -> PodAffinityTerm:
    """`term` of a pod in `namespace` with `labels`; `namespace_labels` None: not known."""
    selector = with_match_label_keys(term.get("labelSelector"), term.get("matchLabelKeys"), labels)
    mismatch = [k for k in term.get("mismatchLabelKeys") or [] if k in labels]
    if mismatch and selector is not None:
        selector = dict(selector)
        selector["matchExpressions"] = list(selector.get("matchExpressions") or []) + [
            {"key": k, "operator": "NotIn", "values": [labels[k]]} for k in mismatch
        ]
    key = str(term.get("topologyKey", ""))
    listed = {str(n) for n in term.get("namespaces") or []}
    ns_selector = term.get("namespaceSelector")
    if ns_selector is None:
        return PodAffinityTerm(parse(selector), frozenset(listed or {namespace}), key)
    if not ns_selector.get("matchLabels") and not ns_selector.get("matchExpressions"):
        return PodAffinityTerm(parse(selector), None, key)  # {} selects every namespace
    if namespace_labels is None:
        return PodAffinityTerm(parse(selector), None, key, unresolved=True)
    parsed_ns = parse(ns_selector)
    if parsed_ns is not None:
        listed |= {ns for ns, ns_labels in namespace_labels.items() if parsed_ns.matches(ns_labels)}
    return PodAffinityTerm(parse(selector), frozenset(listed), key)


def pod_affinity_terms(spec: Obj, kind: str, mode: str = REQUIRED) -> list[Obj]:
    """The raw terms of `affinity.<kind>.<mode>` (kind: podAffinity or podAntiAffinity)."""
    affinity = (spec.get("affinity") or {}).get(kind) or {}
    return list(affinity.get(mode) or [])
