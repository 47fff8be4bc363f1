from __future__ import annotations

import copy
from typing import Any

import pytest

from agent.model.scheduling import with_match_label_keys
from agent.model.selector import LabelSelector, parse_label_selector
from agent.twin.scheduler_terms import (
    label_selector_matches,
    node_matches_required_affinity,
    parse_selector,
    toleration_tolerates,
)
from tests.twin.scheduler_tables import node, pod


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        (None, {"a": "1"}, False),
        ({}, {"a": "1"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "1"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]},
            {"a": "2"},
            True,
        ),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        (
            {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]},
            {"a": "1"},
            False,
        ),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {}, True),
    ],
)
def test_label_selector(selector: Any, labels: dict[str, str], expected: bool) -> None:
    assert label_selector_matches(selector, labels) is expected


def test_match_label_keys_adds_the_pods_value() -> None:
    merged = with_match_label_keys({"matchLabels": {"app": "x"}}, ["rev"], {"rev": "7"})
    assert label_selector_matches(merged, {"app": "x", "rev": "7"})
    assert not label_selector_matches(merged, {"app": "x", "rev": "8"})


def _affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }


def _expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": op, "values": list(values)}]}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"nodeSelector": {"gpu": "a100"}}, True),
        ({"nodeSelector": {"gpu": "h100"}}, False),
        ({"affinity": _affinity(_expr("gpu", "In", "a100"))}, True),
        ({"affinity": _affinity(_expr("gpu", "NotIn", "a100"))}, False),
        ({"affinity": _affinity(_expr("gpu", "Exists"))}, True),
        ({"affinity": _affinity(_expr("gpu", "DoesNotExist"))}, False),
        ({"affinity": _affinity(_expr("cores", "Gt", "32"))}, True),
        ({"affinity": _affinity(_expr("cores", "Lt", "32"))}, False),
        # terms are ORed
        ({"affinity": _affinity(_expr("gpu", "In", "h100"), _expr("gpu", "In", "a100"))}, True),
        # an empty term matches nothing
        ({"affinity": _affinity({})}, False),
        # as kube-scheduler matches them: no terms, or a required selector without
        # any, matches no node
        ({"affinity": _affinity()}, False),
        ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}}, False),
        # an invalid requirement makes its term match nothing; the other terms still count
        ({"affinity": _affinity(_expr("gpu", "NotIn"))}, False),
        ({"affinity": _affinity(_expr("gpu", "Exists", "a100"))}, False),
        ({"affinity": _affinity(_expr("cores", "Gt", "1_0"))}, False),
        ({"affinity": _affinity(_expr("cores", "Gt", "+10"))}, True),
        ({"affinity": _affinity(_expr("gpu", "NotIn"), _expr("gpu", "In", "a100"))}, True),
        (
            {"affinity": _affinity({"matchFields": [{"key": "metadata.name", "operator": "Exists"}]})},
            False,
        ),
        (
            {
                "affinity": _affinity(
                    {"matchFields": [
                        {"key": "metadata.name", "operator": "In", "values": ["n1", "n2"]}
                    ]}
                )
            },
            False,
        ),
        (
            {
                "affinity": _affinity(
                    {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n2"]}]}
                )
            },
            True,
        ),
        (
            {
                "affinity": _affinity(
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
                )
            },
            True,
        ),
    ],
)
def test_required_node_affinity(spec: dict[str, Any], expected: bool) -> None:
    n = node("n1", labels={"gpu": "a100", "cores": "64"})
    assert node_matches_required_affinity(pod("p", **spec), n) is expected


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, True),
        ({"key": "nvidia.com/gpu", "operator": "Exists"}, True),
        ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}, True),
        ({"key": "nvidia.com/gpu", "operator": "Equal", "value": "absent"}, False),
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"operator": "Exists"}, True),
        ({"key": "other", "operator": "Exists"}, False),
    ],
)
def test_toleration(toleration: dict[str, Any], expected: bool) -> None:
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    assert toleration_tolerates(toleration, taint) is expected


# --- the core parser behind label_selector_matches -------------------------------------------


@pytest.mark.parametrize(
    "selector",
    [
        {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["0"]}]},
        {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
        {"matchExpressions": [{"key": "a", "operator": "NotIn"}]},
        {"matchExpressions": [{"key": "a", "operator": "In", "values": "1"}]},
        {"matchLabels": {"a": 1}},
        {"matchLabels": {"a": ["1"]}},
        {"podSelector": {}},
    ],
)
def test_an_invalid_selector_matches_nothing(selector: Any) -> None:
    assert parse_selector(selector) is None
    assert not label_selector_matches(selector, {"a": "1"})


def test_parsed_selectors_are_the_cores_and_cached() -> None:
    raw = {
        "matchLabels": {"app": "x"},
        "matchExpressions": [{"key": "rev", "operator": "NotIn", "values": ["1"]}],
    }
    first = parse_selector(raw)
    assert first == parse_label_selector(raw, where="labelSelector")
    assert parse_selector(copy.deepcopy(raw)) is first
    assert parse_selector(None) is None
    assert parse_selector({}) == LabelSelector()


def test_cache_tells_a_values_string_from_a_values_list() -> None:
    as_string = {"matchExpressions": [{"key": "a", "operator": "In", "values": "xy"}]}
    as_list = {"matchExpressions": [{"key": "a", "operator": "In", "values": ["x", "y"]}]}
    assert parse_selector(as_string) is None
    assert label_selector_matches(as_list, {"a": "x"})
    assert parse_selector(as_string) is None
