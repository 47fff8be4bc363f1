"""Label and field selector parsing and matching, as the API server does it."""

from __future__ import annotations

from typing import Any

import pytest

from agent.model.selector import LabelSelector, Requirement, SelectorOperator, parse_label_selector
from agent.twin.selectors import SelectorError, matcher, parse_fields, parse_labels

LABELS = {"app": "web", "tier": "front", "training.kubeflow.org/job-name": "bert"}


@pytest.mark.parametrize(
    ("selector", "expect"),
    [
        ("", True),
        ("app=web", True),
        ("app==web", True),
        ("app!=web", False),
        ("app!=db", True),
        ("missing!=x", True),
        ("app in (web,db)", True),
        ("app in (db)", False),
        ("app notin (db)", True),
        ("missing notin (db)", True),
        ("tier", True),
        ("!tier", False),
        ("!missing", True),
        ("app=web,tier=back", False),
        ("training.kubeflow.org/job-name in (bert, gpt), app", True),
        ("app in (web),!missing,tier notin (x,y)", True),
    ],
)
def test_label_selectors(selector: str, expect: bool) -> None:
    match = matcher(selector, None, ())
    obj = {"metadata": {"labels": LABELS}}
    assert (match is None or match(obj)) is expect


@pytest.mark.parametrize(
    "selector",
    ["app in (web", "app in web)", "=web", "app=we b", "a b c", "Bad Key=1", "app=" + "x" * 64],
)
def test_bad_label_selectors(selector: str) -> None:
    with pytest.raises(SelectorError):
        parse_labels(selector)


@pytest.mark.parametrize(
    ("selector", "expect"),
    [
        ("metadata.name=p1", True),
        ("metadata.name!=p1", False),
        ("metadata.namespace=ml,spec.nodeName=n1", True),
        ("spec.nodeName=", False),
        ("status.phase==Running", True),
        ("status.phase!=Pending", True),
    ],
)
def test_field_selectors(selector: str, expect: bool) -> None:
    obj = {"metadata": {"name": "p1", "namespace": "ml"}, "spec": {"nodeName": "n1"},
           "status": {"phase": "Running"}}
    match = matcher(None, selector, ("spec.nodeName", "status.phase"))
    assert match is not None and match(obj) is expect


def test_unsupported_field_is_refused() -> None:
    with pytest.raises(SelectorError, match="field label not supported: spec.schedulerName"):
        parse_fields("spec.schedulerName=x", ("spec.nodeName",))


def test_label_selector_strings_become_the_cores_requirements() -> None:
    parsed = parse_labels("app=web,tier!=db,env in (a,b),gpu,!spot")
    assert parsed == LabelSelector(
        match_expressions=(
            Requirement("app", SelectorOperator.IN, frozenset({"web"})),
            Requirement("tier", SelectorOperator.NOT_IN, frozenset({"db"})),
            Requirement("env", SelectorOperator.IN, frozenset({"a", "b"})),
            Requirement("gpu", SelectorOperator.EXISTS),
            Requirement("spot", SelectorOperator.DOES_NOT_EXIST),
        )
    )


@pytest.mark.parametrize(
    ("text", "obj"),
    [
        ("app==web", {"matchLabels": {"app": "web"}}),
        (
            "app notin (db)",
            {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["db"]}]},
        ),
        ("!tier", {"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}),
    ],
)
def test_strings_and_objects_match_alike(text: str, obj: dict[str, Any]) -> None:
    from_text, from_obj = parse_labels(text), parse_label_selector(obj, where="")
    for labels in ({}, LABELS, {"app": "db"}, {"tier": "x"}):
        assert from_text.matches(labels) is from_obj.matches(labels)
