"""LabelSelector: Kubernetes matching semantics and parse errors naming the field (table-driven)."""

from __future__ import annotations

from typing import Any

import pytest

from agent.errors import PolicyError
from agent.model.selector import LabelSelector, parse_label_selector

LABELS = {"app": "web", "tier": "front"}


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        (None, {}, True),
        ({}, LABELS, True),
        ({"matchLabels": {"app": "web"}}, LABELS, True),
        ({"matchLabels": {"app": "db"}}, LABELS, False),
        ({"matchLabels": {"app": "web", "tier": "back"}}, LABELS, False),
        ({"matchLabels": {"zone": "a"}}, LABELS, False),
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["db", "web"]}]}, LABELS, True),
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["db"]}]}, LABELS, False),
        ({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}, LABELS, False),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}, LABELS, False),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["db"]}]}, LABELS, True),
        ({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}, LABELS, True),
        ({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, LABELS, True),
        ({"matchExpressions": [{"key": "zone", "operator": "Exists"}]}, LABELS, False),
        ({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}, LABELS, True),
        ({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, LABELS, False),
        (
            {
                "matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["back"]}],
            },
            LABELS,
            False,
        ),
        ({"matchLabels": {"app": ""}}, {"app": ""}, True),
        ({"matchLabels": {"app": ""}}, {}, False),
    ],
)
def test_matches(selector: Any, labels: dict[str, str], expected: bool) -> None:
    assert parse_label_selector(selector, where="sel").matches(labels) is expected


def test_keys_and_emptiness() -> None:
    sel = parse_label_selector(
        {"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]},
        where="sel",
    )
    assert sel.keys() == frozenset({"a", "b"})
    assert not sel.is_empty()
    assert LabelSelector().is_empty()
    assert LabelSelector().keys() == frozenset()


def test_equal_selectors_hash_equal() -> None:
    raw = {"matchLabels": {"b": "2", "a": "1"}, "matchExpressions": [{"key": "c", "operator": "In", "values": ["y", "x"]}]}
    same = {"matchLabels": {"a": "1", "b": "2"}, "matchExpressions": [{"key": "c", "operator": "In", "values": ["x", "y"]}]}
    assert hash(parse_label_selector(raw, where="s")) == hash(parse_label_selector(same, where="s"))
    assert parse_label_selector(raw, where="s") == parse_label_selector(same, where="s")


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("app=web", "spec.sel: expected a label selector object, got str"),
        ({"matchLabels": "app"}, "spec.sel.matchLabels: expected a map, got str"),
        ({"matchLabels": {"app": 1}}, "spec.sel.matchLabels.app: expected a string, got int"),
        ({"matchLabels": {"": "x"}}, "spec.sel.matchLabels: label key '' is not a non-empty string"),
        ({"matchExpressions": {"key": "a"}}, "spec.sel.matchExpressions: expected a list, got dict"),
        ({"matchExpressions": ["a"]}, "spec.sel.matchExpressions[0]: expected an object, got str"),
        ({"matchExpressions": [{"operator": "Exists"}]}, "spec.sel.matchExpressions[0].key: missing"),
        ({"matchExpressions": [{"key": "a"}]}, "spec.sel.matchExpressions[0].operator: missing or not a string"),
        ({"matchExpressions": [{"key": "a", "operator": "in", "values": ["x"]}]}, "spec.sel.matchExpressions[0].operator: unknown operator 'in'"),
        ({"matchExpressions": [{"key": "a", "operator": "In"}]}, "spec.sel.matchExpressions[0].values: operator In needs at least one value"),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": []}]}, "spec.sel.matchExpressions[0].values: operator NotIn needs at least one value"),
        ({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}, "spec.sel.matchExpressions[0].values: operator Exists takes no values"),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist", "values": ["x"]}]}, "spec.sel.matchExpressions[0].values: operator DoesNotExist takes no values"),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": "x"}]}, "spec.sel.matchExpressions[0].values: expected a list, got str"),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": [True]}]}, "spec.sel.matchExpressions[0].values[0]: expected a string, got bool"),
        ({"matchLabel": {"a": "b"}}, "spec.sel.matchLabel: unknown selector field"),
    ],
)
def test_parse_errors_name_the_field(selector: Any, message: str) -> None:
    with pytest.raises(PolicyError) as info:
        parse_label_selector(selector, where="spec.sel")
    assert str(info.value) == message or str(info.value).startswith(message), str(info.value)
