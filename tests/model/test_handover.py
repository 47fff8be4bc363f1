"""The hand-over (pure): JSON 6902 operations from a merge patch, the manifest a fix is for."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.errors import InputError
from agent.model.handover import SourceKind, json6902, parse_format, source_manifest


@pytest.mark.parametrize(
    ("base", "patch", "ops"),
    [
        ({"a": {"b": 1}}, {"a": {"b": 2}}, [{"op": "replace", "path": "/a/b", "value": 2}]),
        ({"a": {}}, {"a": {"c": {"d": 1}}}, [{"op": "add", "path": "/a/c", "value": {"d": 1}}]),
        ({"a": {"b": 1}}, {"a": {"b": None}}, [{"op": "remove", "path": "/a/b"}]),
        ({"a": {}}, {"a": {"gone": None}}, []),
        ({}, {"x/y~z": 1}, [{"op": "add", "path": "/x~1y~0z", "value": 1}]),
        ({"l": [1]}, {"l": [2, 3]}, [{"op": "replace", "path": "/l", "value": [2, 3]}]),
        ({"a": 1}, {"a": {"b": None, "c": 2}}, [{"op": "replace", "path": "/a", "value": {"c": 2}}]),
    ],
)
def test_json6902(base: Any, patch: Any, ops: list[dict[str, Any]]) -> None:
    assert json6902(base, patch) == ops


def test_source_manifest_prefers_what_kubectl_last_applied() -> None:
    applied = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    live = {"apiVersion": "v1", "kind": "ConfigMap", "status": {"x": 1},
            "metadata": {"name": "c", "uid": "u", "resourceVersion": "3", "managedFields": [],
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration":
                                         json.dumps(applied), "note": "n"}}}
    assert source_manifest(live) == (applied, SourceKind.LAST_APPLIED)
    live["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = "{bad"
    found, kind = source_manifest(live)
    assert kind is SourceKind.LIVE
    assert found == {"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": "c", "annotations": {"note": "n"}}}


def test_parse_format_names_the_choices() -> None:
    with pytest.raises(InputError, match="--format: expected one of manifest, kustomize, json6902"):
        parse_format("helm")
