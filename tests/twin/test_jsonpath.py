"""Kubernetes JSONPath as CRD printer columns use it: paths, slices, filters, printing, errors."""

from __future__ import annotations

from typing import Any

import pytest

from agent.twin.jsonpath import JsonPathError, compile_path, text

OBJ = {
    "metadata": {"name": "j", "labels": {"app.kubernetes.io/name": "x"}},
    "spec": {"suspend": False, "replicas": [1, 2, 3]},
    "status": {
        "restarts": 0,
        "conditions": [
            {"type": "Suspended", "status": "False"},
            {"type": "Completed", "status": "True"},
        ],
    },
}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        (".metadata.name", ["j"]),
        ("{.metadata.name}", ["j"]),
        (".spec.suspend", [False]),
        (".status.restarts", [0]),
        (".status.conditions[-1:].type", ["Completed"]),
        (".status.conditions[0].type", ["Suspended"]),
        (".status.conditions[-1].status", ["True"]),
        (".status.conditions[5].type", []),
        (".status.conditions[*].type", ["Suspended", "Completed"]),
        ('.status.conditions[?(@.type=="Completed")].status', ["True"]),
        (".status.conditions[?(@.type=='Suspended')].status", ["False"]),
        ('.status.conditions[?(@.type!="Completed")].type', ["Suspended"]),
        ('.status.conditions[?(@.type=="Failed")].status', []),
        (".spec.replicas[0:2]", [1, 2]),
        (".metadata.labels['app.kubernetes.io/name']", ["x"]),
        (".metadata.labels.app\\.kubernetes\\.io/name", ["x"]),
        (".status.terminalState", []),
        (".spec.replicas.missing", []),
    ],
)
def test_find(expression: str, expected: list[Any]) -> None:
    assert compile_path(expression).find(OBJ) == expected


@pytest.mark.parametrize(
    ("value", "printed"),
    [(False, "false"), (True, "true"), (0, "0"), ("a", "a"), ({"k": [1]}, '{"k":[1]}'),
     ([1, "b"], '[1,"b"]'), (None, "<nil>")],
)  # fmt: skip
def test_text_prints_as_the_jsonpath_printer(value: Any, printed: str) -> None:
    assert text(value) == printed


@pytest.mark.parametrize(
    ("expression", "needle"),
    [
        ("status.x", "must start with"),
        ("..name", "recursive descent"),
        (".a[?(@.x > 1)]", "unsupported filter"),
        (".a[1", "unclosed"),
        (".a[x]", "unsupported subscript"),
    ],
)
def test_unsupported_expressions_are_refused(expression: str, needle: str) -> None:
    with pytest.raises(JsonPathError, match=needle.replace("[", r"\[")):
        compile_path(expression)
