"""Which policy blocks may select an endpoint: an index of the blocks by a label their selector
requires, narrowed by the namespace it requires.

Called by `agent.policy.evaluator.PolicySet` when it interns an endpoint (its selecting blocks).
A block is filed under one label pair of which an endpoint must carry one to be selected (its
selector's first matchLabels pair other than the namespace, else the namespace pair, else each
value of its first `In` expression); a block with none is looked at for every endpoint. A
selector that names the namespace too (`io.kubernetes.pod.namespace` in matchLabels, as every
namespaced Cilium policy and NetworkPolicy does) is filed under that namespace as well, so a label
pair many namespaces' policies share (`zone: zone-a`) yields only the blocks of the endpoint's own
namespace (and those naming none). `candidates` returns them in the order an unnarrowed index
would (unanchored blocks first, then by the endpoint's label pairs in order, each pair's blocks in
policy order, each block once); the caller still matches every candidate's selector, so the
index only saves work. What it does not do: decide selection itself, or know hops.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Generic, TypeVar

from agent.model.selector import LabelSelector, SelectorOperator
from agent.policy.identity import NAMESPACE_KEY

Block = TypeVar("Block")
Pair = tuple[str, str]


def anchors(selector: LabelSelector) -> list[Pair]:
    """Label pairs of which an endpoint must carry one to be selected (empty: no such pairs)."""
    if selector.match_labels:
        others = [pair for pair in selector.match_labels if pair[0] != NAMESPACE_KEY]
        return [others[0] if others else selector.match_labels[0]]
    for req in selector.match_expressions:
        if req.operator is SelectorOperator.IN:
            return [(req.key, value) for value in sorted(req.values)]
    return []


def required_namespace(selector: LabelSelector) -> str | None:
    """The namespace an endpoint must be in to be selected (its matchLabels' namespace value),
    None when the selector names none."""
    for key, value in selector.match_labels:
        if key == NAMESPACE_KEY:
            return value
    return None


class AnchorIndex(Generic[Block]):
    """The blocks of one policy set by anchor and namespace (see the module docstring)."""

    def __init__(self, blocks: Sequence[Block], selector: Callable[[Block], LabelSelector]) -> None:
        by_anchor: dict[Pair, list[Block]] = {}
        unanchored: list[Block] = []
        namespace: dict[int, str | None] = {}
        for block in blocks:
            sel = selector(block)
            namespace[id(block)] = required_namespace(sel)
            found = anchors(sel)
            if not found:
                unanchored.append(block)
            for pair in found:
                by_anchor.setdefault(pair, []).append(block)
        self.unanchored = tuple(unanchored)
        # each pair: its blocks by the namespace an endpoint is in (those of that namespace and
        # those naming none, in policy order), and the blocks naming none (any other namespace)
        self._by_anchor: dict[Pair, tuple[Mapping[str, tuple[Block, ...]], tuple[Block, ...]]] = {}
        for pair, filed in by_anchor.items():
            named = {ns for b in filed if (ns := namespace[id(b)]) is not None}
            per_ns = {ns: tuple(b for b in filed if namespace[id(b)] in (None, ns))
                      for ns in named}  # fmt: skip
            self._by_anchor[pair] = (per_ns, tuple(b for b in filed if namespace[id(b)] is None))

    def candidates(self, labels: Mapping[str, str]) -> dict[int, Block]:
        """By id, in order: the blocks that may select an endpoint of `labels` (its identity
        labels, the namespace's among them)."""
        out: dict[int, Block] = {id(b): b for b in self.unanchored}
        ns = labels.get(NAMESPACE_KEY)
        by_anchor = self._by_anchor
        for pair in labels.items():
            filed = by_anchor.get(pair)
            if filed is None:
                continue
            per_ns, rest = filed
            for block in (per_ns.get(ns, rest) if ns is not None else rest):
                out[id(block)] = block
        return out
