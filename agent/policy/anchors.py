"""The index of policy blocks by a label their subject selector requires (their anchor).

Who calls it: `agent.policy.evaluator.PolicySet`, which indexes its blocks once and asks, for
every new endpoint identity, which blocks may select it (each candidate is then matched in
full). Pure: selectors in, label pairs and candidate lists out.

An anchor is one label pair every endpoint a selector selects carries (a matchLabels pair other
than the namespace's, else the namespace's; else each value of the first `In` requirement);
a selector with neither has none (its blocks are candidates for every endpoint). The blocks of
one anchor that require a namespace as well are kept apart by it: an endpoint of another
namespace cannot match them, so its candidates are its own namespace's and those that name no
namespace, in the order the blocks were given (their order is the order they select in).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from agent.model.selector import LabelSelector, SelectorOperator
from agent.policy.identity import NAMESPACE_KEY

T = TypeVar("T")


def anchors(selector: LabelSelector) -> list[tuple[str, str]]:
    """Label pairs of which an endpoint must carry one to be selected (empty: no such pairs)."""
    if selector.match_labels:
        others = [pair for pair in selector.match_labels if pair[0] != NAMESPACE_KEY]
        return [others[0] if others else selector.match_labels[0]]
    for req in selector.match_expressions:
        if req.operator is SelectorOperator.IN:
            return [(req.key, value) for value in sorted(req.values)]
    return []


@dataclass(frozen=True, slots=True)
class Anchored(Generic[T]):
    """The blocks of one anchor, in their order, those that require a namespace apart by it
    (each with its place in the order)."""

    anywhere: tuple[tuple[int, T], ...]
    by_namespace: Mapping[str, tuple[tuple[int, T], ...]]

    def among(self, namespace: str | None) -> list[T]:
        """The blocks an endpoint of `namespace` may match, in their order."""
        own = self.by_namespace.get(namespace) if namespace is not None else None
        if not own:
            return [entry for _, entry in self.anywhere]
        if not self.anywhere:
            return [entry for _, entry in own]
        return [entry for _, entry in sorted((*self.anywhere, *own), key=lambda e: e[0])]


def split_by_namespace(entries: Sequence[tuple[LabelSelector | None, T]]) -> Anchored[T]:
    """The blocks of one anchor (each with its subject selector), apart by required namespace."""
    anywhere: list[tuple[int, T]] = []
    by_namespace: dict[str, list[tuple[int, T]]] = {}
    for place, (selector, entry) in enumerate(entries):
        required = [v for k, v in selector.match_labels if k == NAMESPACE_KEY] if selector else []
        if required:
            by_namespace.setdefault(required[0], []).append((place, entry))
        else:
            anywhere.append((place, entry))
    return Anchored(tuple(anywhere), {k: tuple(v) for k, v in by_namespace.items()})
