"""Patch formats: JSON merge (RFC 7386), JSON patch (RFC 6902), strategic merge (built-in kinds)."""

from __future__ import annotations

from typing import Any

import pytest

from agent.twin.patch import PatchError, PatchType, apply, json_patch, merge_patch, strategic_merge

POD = {
    "metadata": {"name": "p", "labels": {"a": "1", "b": "2"}, "finalizers": ["x"]},
    "spec": {
        "containers": [
            {"name": "main", "image": "v1", "ports": [{"containerPort": 80, "name": "http"}],
             "env": [{"name": "A", "value": "1"}]},
            {"name": "side", "image": "s1"},
        ],
        "tolerations": [{"key": "gpu", "operator": "Exists"}],
        "nodeSelector": {"zone": "a"},
    },
}


@pytest.mark.parametrize(
    ("target", "patch", "expect"),
    [
        ({"a": 1, "b": 2}, {"a": None}, {"b": 2}),
        ({"a": {"x": 1}}, {"a": {"y": 2}}, {"a": {"x": 1, "y": 2}}),
        ({"l": [1, 2]}, {"l": [3]}, {"l": [3]}),
        ({"a": 1}, {"a": {"b": None}}, {"a": {}}),
        ({}, {"new": {"deep": [1]}}, {"new": {"deep": [1]}}),
    ],
)
def test_merge_patch(target: Any, patch: Any, expect: Any) -> None:
    assert merge_patch(target, patch) == expect


@pytest.mark.parametrize(
    ("ops", "expect"),
    [
        ([{"op": "add", "path": "/a/-", "value": 9}], {"a": [1, 2, 9], "b": {"c": 1}}),
        ([{"op": "add", "path": "/a/0", "value": 0}], {"a": [0, 1, 2], "b": {"c": 1}}),
        ([{"op": "remove", "path": "/a/1"}], {"a": [1], "b": {"c": 1}}),
        ([{"op": "replace", "path": "/b/c", "value": 5}], {"a": [1, 2], "b": {"c": 5}}),
        ([{"op": "move", "from": "/b/c", "path": "/d"}], {"a": [1, 2], "b": {}, "d": 1}),
        ([{"op": "copy", "from": "/b", "path": "/e"}], {"a": [1, 2], "b": {"c": 1},
                                                         "e": {"c": 1}}),
        ([{"op": "test", "path": "/b/c", "value": 1},
          {"op": "add", "path": "/b~1x", "value": 2}], {"a": [1, 2], "b": {"c": 1}, "b/x": 2}),
    ],
)
def test_json_patch(ops: list[dict[str, Any]], expect: Any) -> None:
    target = {"a": [1, 2], "b": {"c": 1}}
    assert json_patch(target, ops) == expect
    assert target == {"a": [1, 2], "b": {"c": 1}}  # the input is left alone


@pytest.mark.parametrize(
    ("ops", "code"),
    [
        ([{"op": "test", "path": "/b/c", "value": 2}], 422),
        ([{"op": "remove", "path": "/nope"}], 422),
        ([{"op": "replace", "path": "/nope/x", "value": 1}], 422),
        ([{"op": "add", "path": "/a/7", "value": 1}], 422),
        ([{"op": "frobnicate", "path": "/a"}], 400),
        ([{"op": "add", "path": "a", "value": 1}], 400),
        ({"op": "add"}, 400),
    ],
)
def test_json_patch_errors(ops: Any, code: int) -> None:
    with pytest.raises(PatchError) as err:
        json_patch({"a": [1, 2], "b": {"c": 1}}, ops)
    assert err.value.code == code


def test_strategic_merge_lists_by_key_and_replaces_keyless_lists() -> None:
    out = strategic_merge(POD, {"spec": {
        "containers": [{"name": "main", "image": "v2",
                        "ports": [{"containerPort": 9090, "name": "metrics"}],
                        "env": [{"name": "B", "value": "2"}]},
                       {"name": "new", "image": "n"}],
        "tolerations": [{"key": "zone", "operator": "Exists"}],
    }})
    main, side, new = out["spec"]["containers"]
    assert (main["image"], side["name"], new["name"]) == ("v2", "side", "new")
    assert [p["containerPort"] for p in main["ports"]] == [80, 9090]
    assert [e["name"] for e in main["env"]] == ["A", "B"]
    # Tolerations have no merge key in Kubernetes: the list is replaced.
    assert out["spec"]["tolerations"] == [{"key": "zone", "operator": "Exists"}]
    assert out["spec"]["nodeSelector"] == {"zone": "a"}


def test_strategic_merge_directives() -> None:
    out = strategic_merge(POD, {
        "metadata": {"labels": {"a": None}, "finalizers": ["y"]},
        "spec": {"containers": [{"name": "side", "$patch": "delete"}],
                 "$setElementOrder/containers": [{"name": "main"}],
                 "nodeSelector": {"$patch": "replace", "rack": "r1"}},
    })
    assert out["metadata"]["labels"] == {"b": "2"}
    assert out["metadata"]["finalizers"] == ["x", "y"]
    assert [c["name"] for c in out["spec"]["containers"]] == ["main"]
    assert out["spec"]["nodeSelector"] == {"rack": "r1"}


def test_strategic_merge_needs_the_merge_key() -> None:
    with pytest.raises(PatchError) as err:
        strategic_merge(POD, {"spec": {"containers": [{"image": "x"}]}})
    assert err.value.code == 422


@pytest.mark.parametrize(
    ("patch_type", "body", "code"),
    [
        (PatchType.MERGE, [1], 400),
        (PatchType.STRATEGIC, [1], 400),
        (PatchType.APPLY, [1], 400),
    ],
)
def test_apply_refuses_wrong_bodies(patch_type: PatchType, body: Any, code: int) -> None:
    with pytest.raises(PatchError) as err:
        apply({"a": 1}, body, patch_type)
    assert err.value.code == code
