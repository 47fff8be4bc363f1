"""The anchor index: which label pair a selector is indexed by, and the candidates an endpoint of
a namespace gets from one anchor (its namespace's and those naming none, in the given order)."""

from __future__ import annotations

from agent.model.selector import LabelSelector, Requirement, SelectorOperator
from agent.policy.anchors import anchors, split_by_namespace
from agent.policy.identity import NAMESPACE_KEY


def selector(*pairs: tuple[str, str], expressions: tuple[Requirement, ...] = ()) -> LabelSelector:
    return LabelSelector(match_labels=tuple(pairs), match_expressions=expressions)


def test_a_selector_is_anchored_by_a_pair_it_requires() -> None:
    assert anchors(selector((NAMESPACE_KEY, "ml"), ("zone", "a"))) == [("zone", "a")]
    assert anchors(selector((NAMESPACE_KEY, "ml"))) == [(NAMESPACE_KEY, "ml")]
    tiers = Requirement("tier", SelectorOperator.IN, frozenset({"t2", "t1"}))
    assert anchors(selector(expressions=(tiers,))) == [("tier", "t1"), ("tier", "t2")]
    absent = Requirement("tier", SelectorOperator.NOT_IN, frozenset({"t1"}))
    assert anchors(selector(expressions=(absent,))) == []


def test_an_endpoint_gets_its_namespaces_blocks_and_the_clusterwide_ones_in_order() -> None:
    entries = [(selector((NAMESPACE_KEY, "ml"), ("zone", "a")), "ml-1"),
               (selector(("zone", "a")), "wide-1"),
               (selector((NAMESPACE_KEY, "web"), ("zone", "a")), "web-1"),
               (selector((NAMESPACE_KEY, "ml"), ("zone", "a")), "ml-2"),
               (None, "none")]  # fmt: skip
    index = split_by_namespace(entries)
    assert index.among("ml") == ["ml-1", "wide-1", "ml-2", "none"]
    assert index.among("web") == ["wide-1", "web-1", "none"]
    assert index.among("other") == index.among(None) == ["wide-1", "none"]
