"""Matching rules the twin's scheduler shares: label selectors, node selector terms, tolerations.

Called by the scheduler's filters and scores (`scheduler_filters`, `scheduler_scores`). Works on
plain Kubernetes JSON (dicts) as the twin's store holds them. metav1.LabelSelector objects (pod
affinity, spread, namespace and workload selectors) are parsed by the core's
`agent.model.scheduling.parse_selector_or_none` and matched by its `LabelSelector`; parsed
selectors are cached, since the scheduler resolves the same selectors for every pod in every cycle.
Node selector terms and required node affinity are matched by the core's `agent.model.scheduling`.
Pure: no I/O, no clock; the parse cache is its only state. It does not decide placement; it only
answers "does this match".
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from agent.model.scheduling import parse_selector_or_none, required_node_affinity_matches
from agent.model.selector import LabelSelector

Labels = Mapping[str, str]
Obj = Mapping[str, Any]
SELECTOR_CACHE_SIZE = 4096  # distinct selectors kept parsed; the cache is emptied when full
_parsed: dict[Hashable, LabelSelector | None] = {}


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


def parse_selector(selector: Obj | None) -> LabelSelector | None:
    """A metav1.LabelSelector object parsed by the core; None for no selector or an invalid one."""
    if selector is None:
        return None
    try:
        key = _cache_key(selector)
        hash(key)
    except (AttributeError, TypeError):
        return parse_selector_or_none(selector)
    try:
        return _parsed[key]
    except KeyError:
        pass
    parsed = parse_selector_or_none(selector)
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


def node_matches_required_affinity(pod: Obj, node: Obj) -> bool:
    """nodeSelector (every pair) AND required node affinity (terms ORed), as upstream matches them."""
    name = str((node.get("metadata") or {}).get("name", ""))
    return required_node_affinity_matches(pod.get("spec") or {}, node_labels(node), name)


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
