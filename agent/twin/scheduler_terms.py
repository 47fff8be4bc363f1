"""Matching rules the twin's scheduler shares: label selectors, node selector terms, tolerations.

Called by the scheduler's filters and scores (`scheduler_filters`, `scheduler_scores`). Works on
plain Kubernetes JSON (dicts) as the twin's store holds them. metav1.LabelSelector objects (pod
affinity, spread, namespace and workload selectors) are parsed by the core's
`agent.model.selector.parse_label_selector` and matched by its `LabelSelector`; parsed selectors are
cached, since the scheduler resolves the same selectors for every pod in every cycle. Node selector
terms (Gt, Lt, matchFields) have their own matcher here. Pure: no I/O, no clock; the parse cache
is its only state. It does not decide placement; it only answers "does this match".
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from agent.errors import PolicyError
from agent.model.selector import LabelSelector, parse_label_selector

Labels = Mapping[str, str]
Obj = Mapping[str, Any]
SELECTOR_CACHE_SIZE = 4096  # distinct selectors kept parsed; the cache is emptied when full
_parsed: dict[Hashable, LabelSelector | None] = {}


def _node_requirement_matches(expr: Obj, labels: Labels) -> bool:
    """One NodeSelectorRequirement (In, NotIn, Exists, DoesNotExist, Gt, Lt); unknown: False."""
    key = str(expr.get("key", ""))
    op = str(expr.get("operator", ""))
    values = [str(v) for v in expr.get("values") or []]
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        if not present or len(values) != 1:
            return False
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def _cache_key(selector: Obj) -> Hashable:
    """Everything `parse_label_selector` reads, as a hashable value (TypeError when it cannot be)."""
    labels = selector.get("matchLabels")
    exprs = selector.get("matchExpressions")
    return (
        tuple(selector),
        type(labels),
        tuple(labels.items()) if isinstance(labels, Mapping) else labels,
        type(exprs),
        tuple(
            (e.get("key"), e.get("operator"), type(e.get("values")), tuple(e.get("values") or ()))
            for e in exprs or ()
        ),
    )


def _parse(selector: Obj) -> LabelSelector | None:
    try:
        return parse_label_selector(selector, where="labelSelector")
    except PolicyError:
        return None  # the API server would have refused it; an invalid selector matches nothing


def parse_selector(selector: Obj | None) -> LabelSelector | None:
    """A metav1.LabelSelector object parsed by the core; None for no selector or an invalid one."""
    if selector is None:
        return None
    try:
        key = _cache_key(selector)
        hash(key)
    except (AttributeError, TypeError):
        return _parse(selector)
    try:
        return _parsed[key]
    except KeyError:
        pass
    parsed = _parse(selector)
    if len(_parsed) >= SELECTOR_CACHE_SIZE:
        _parsed.clear()
    _parsed[key] = parsed
    return parsed


def selector_matches(selector: LabelSelector | None, labels: Labels) -> bool:
    """A parsed selector; None (no selector, or an invalid one) matches nothing."""
    return selector is not None and selector.matches(labels)


def label_selector_matches(selector: Obj | None, labels: Labels) -> bool:
    """A metav1.LabelSelector: matchLabels AND matchExpressions. None matches nothing; {} all."""
    return selector_matches(parse_selector(selector), labels)


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


def node_selector_term_matches(term: Obj, node_labels: Labels, node_name: str) -> bool:
    """One NodeSelectorTerm: its matchExpressions and matchFields ANDed; an empty term matches none."""
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False
    if not all(_node_requirement_matches(e, node_labels) for e in exprs):
        return False
    for f in fields:
        if f.get("key") != "metadata.name":
            return False
        if not _node_requirement_matches(f, {"metadata.name": node_name}):
            return False
    return True


def node_matches_required_affinity(pod: Obj, node: Obj) -> bool:
    """nodeSelector (every pair) AND required node affinity (terms ORed)."""
    labels = node_labels(node)
    spec = pod.get("spec") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or None
    if required is None:
        return True
    terms = required.get("nodeSelectorTerms") or []
    name = str((node.get("metadata") or {}).get("name", ""))
    return any(node_selector_term_matches(t, labels, name) for t in terms)


def node_labels(node: Obj) -> dict[str, str]:
    return dict((node.get("metadata") or {}).get("labels") or {})


def pod_labels(pod: Obj) -> dict[str, str]:
    return dict((pod.get("metadata") or {}).get("labels") or {})


def toleration_tolerates(toleration: Obj, taint: Obj) -> bool:
    """v1 ToleratesTaint: effect (empty = all), key (empty + Exists = all), Equal/Exists."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    op = toleration.get("operator") or "Equal"
    if op == "Exists":
        return True
    if op == "Equal":
        return bool(key) and (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def untolerated_taint(
    pod: Obj, node: Obj, *, effects: tuple[str, ...] = ("NoSchedule", "NoExecute")
) -> Obj | None:
    """The first taint of `node` with one of `effects` that no toleration of `pod` tolerates."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") not in effects:
            continue
        if not any(toleration_tolerates(t, taint) for t in tolerations):
            found: Obj = taint
            return found
    return None
