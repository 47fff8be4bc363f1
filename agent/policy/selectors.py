"""The selectors of a policy manifest, on identity keys, with each kind's namespace rules applied.

Who calls it: the readers of `agent.policy.cilium_policy` and `agent.policy.kubernetes_policy`, and
`agent.policy.manifest` (the lenient `subject_selectors`). Cilium's normalisation: a selector's
keys are rewritten onto identity keys (`agent.policy.identity.selector_key`); a CNP's
endpointSelector is limited to its namespace (a `k8s:` namespace match in it is replaced by the
policy's own); a CNP peer selector without a namespace key (and without namespace label keys) gets
the policy's namespace, a CCNP peer selector without one matches every namespace. A NetworkPolicy
peer's namespaceSelector selects on the namespace labels (`io.cilium.k8s.namespace.labels.*`), and
a peer without one stays in the policy's namespace. Errors are `PolicyError` naming the policy and
the field. What it does not do: read anything but selectors, or match them (the evaluator does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.errors import PolicyError
from agent.model.selector import LabelSelector, Requirement, SelectorOperator, parse_label_selector
from agent.policy.context import ManifestContext
from agent.policy.identity import (
    NAMESPACE_KEY,
    NAMESPACE_LABELS_PREFIX,
    UNMATCHABLE_PREFIX,
    selector_key,
)

_K8S_NAMESPACE_KEY = "k8s:" + NAMESPACE_KEY


def label_selector(raw: Any, *, path: str, ctx: ManifestContext) -> LabelSelector:
    """A label selector as written (its keys as they are: a NetworkPolicy's selectors)."""
    try:
        return parse_label_selector(raw, where=path)
    except PolicyError as exc:
        raise PolicyError(f"{ctx.policy_id}: {exc}") from None


def cilium_selector(raw: Any, *, path: str, ctx: ManifestContext) -> LabelSelector:
    """Parse a Cilium selector with its keys rewritten onto identity keys."""
    parsed = label_selector(raw, path=path, ctx=ctx)
    return LabelSelector(
        match_labels=tuple(sorted((selector_key(k), v) for k, v in parsed.match_labels)),
        match_expressions=tuple(
            Requirement(key=selector_key(r.key), operator=r.operator, values=r.values)
            for r in parsed.match_expressions
        ),
    )


def with_namespace(selector: LabelSelector, namespace: str) -> LabelSelector:
    """AND `selector` with "in `namespace`" (a second, different namespace pair matches nothing)."""
    pairs = set(selector.match_labels)
    pairs.add((NAMESPACE_KEY, namespace))
    return LabelSelector(
        match_labels=tuple(sorted(pairs)), match_expressions=selector.match_expressions
    )


def endpoint_selector(
    raw: Any, namespace: str | None, *, path: str, ctx: ManifestContext
) -> LabelSelector:
    """A Cilium endpointSelector limited to the policy's namespace (a CNP)."""
    if namespace is not None and isinstance(raw, Mapping):
        # Cilium replaces a `k8s:` namespace match in a CNP's endpointSelector with the policy's
        # own namespace (other spellings of the key stay and are ANDed).
        labels = raw.get("matchLabels")
        if isinstance(labels, Mapping) and _K8S_NAMESPACE_KEY in labels:
            raw = {
                **raw,
                "matchLabels": {k: v for k, v in labels.items() if k != _K8S_NAMESPACE_KEY},
            }
    subject = cilium_selector(raw, path=path, ctx=ctx)
    return subject if namespace is None else with_namespace(subject, namespace)


def peer_selector(
    raw: Any, namespace: str | None, *, path: str, ctx: ManifestContext
) -> LabelSelector:
    """A fromEndpoints/toEndpoints selector with Cilium's namespace defaulting applied."""
    selector = cilium_selector(raw, path=path, ctx=ctx)
    keys = selector.keys()
    if any(k.startswith(UNMATCHABLE_PREFIX + "reserved:") for k in keys):
        return selector
    if NAMESPACE_KEY in keys:  # `k8s:`, `any:` or unprefixed namespace key
        return selector
    if namespace is None:
        return LabelSelector(
            match_labels=selector.match_labels,
            match_expressions=(
                *selector.match_expressions,
                Requirement(key=NAMESPACE_KEY, operator=SelectorOperator.EXISTS),
            ),
        )
    if any(k.startswith(NAMESPACE_LABELS_PREFIX) for k in keys):
        return selector
    return with_namespace(selector, namespace)


def namespace_peer(pods: LabelSelector, namespaces: LabelSelector) -> LabelSelector:
    """A NetworkPolicy peer with a namespaceSelector: `pods` AND `namespaces` read on the
    namespace labels (any namespace whose labels match)."""
    return _and(pods, _prefixed(namespaces, NAMESPACE_LABELS_PREFIX))


def _prefixed(selector: LabelSelector, prefix: str) -> LabelSelector:
    return LabelSelector(
        match_labels=tuple((prefix + k, v) for k, v in selector.match_labels),
        match_expressions=tuple(
            Requirement(key=prefix + r.key, operator=r.operator, values=r.values)
            for r in selector.match_expressions
        ),
    )


def _and(a: LabelSelector, b: LabelSelector) -> LabelSelector:
    return LabelSelector(
        match_labels=tuple(sorted(set(a.match_labels) | set(b.match_labels))),
        match_expressions=a.match_expressions + b.match_expressions,
    )
