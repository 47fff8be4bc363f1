"""Field sets: an object's paths, the comparison of two objects, FieldsV1 both ways."""

from __future__ import annotations

from typing import Any

import pytest

from agent.twin import fieldset as fs
from agent.twin.fieldset import Typing

BUILTIN = Typing(builtin=True, schema=None)
CUSTOM = Typing(builtin=False, schema={"type": "object", "properties": {
    "spec": {"type": "object", "properties": {
        "items": {"type": "array", "x-kubernetes-list-type": "map",
                  "x-kubernetes-list-map-keys": ["name"],
                  "items": {"type": "object", "properties": {"name": {"type": "string"},
                                                             "v": {"type": "integer"}}}},
        "plain": {"type": "array", "items": {"type": "string"}}}}}})


@pytest.mark.parametrize(
    ("typing", "obj", "fields_v1"),
    [
        (BUILTIN, {"metadata": {"labels": {"a": "1"}}},
         {"f:metadata": {"f:labels": {".": {}, "f:a": {}}}}),
        (BUILTIN, {"spec": {"tolerations": [{"key": "gpu"}], "nodeSelector": {"z": "a"}}},
         {"f:spec": {"f:nodeSelector": {".": {}, "f:z": {}}, "f:tolerations": {}}}),
        (BUILTIN, {"spec": {"containers": [{"name": "c", "image": "i",
                                            "ports": [{"containerPort": 80}]}]}},
         {"f:spec": {"f:containers": {'k:{"name":"c"}': {
             ".": {}, "f:image": {}, "f:name": {},
             "f:ports": {".": {}, 'k:{"containerPort":80,"protocol":"TCP"}': {
                 ".": {}, "f:containerPort": {}}}}}}}),
        (BUILTIN, {"metadata": {"finalizers": ["x"]}, "spec": {"selector": {"matchLabels": {}}}},
         {"f:metadata": {"f:finalizers": {".": {}, 'v:"x"': {}}}, "f:spec": {"f:selector": {}}}),
        (BUILTIN, {"spec": {"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}}},
         {"f:spec": {"f:affinity": {".": {}, "f:nodeAffinity": {
             ".": {}, "f:requiredDuringSchedulingIgnoredDuringExecution": {}}}}}),
        (CUSTOM, {"spec": {"items": [{"name": "a", "v": 1}], "plain": ["x"]}},
         {"f:spec": {".": {}, "f:items": {".": {}, 'k:{"name":"a"}': {".": {}, "f:name": {},
                                                                       "f:v": {}}},
                     "f:plain": {}}}),
    ],
)
def test_paths_of_an_object_in_fields_v1(typing: Typing, obj: Any, fields_v1: Any) -> None:
    paths = fs.paths_of(obj, typing)
    assert fs.to_fields_v1(paths) == fields_v1
    assert fs.from_fields_v1(fields_v1) == paths


@pytest.mark.parametrize(
    ("old", "new", "added", "modified", "removed"),
    [
        ({"spec": {"replicas": 1}}, {"spec": {"replicas": 2}}, [], [".spec.replicas"], []),
        ({"metadata": {"labels": {"a": "1"}}}, {"metadata": {"labels": {"a": "1", "b": "2"}}},
         [".metadata.labels.b"], [], []),
        ({"spec": {"nodeSelector": {"z": "a"}}}, {"spec": {}}, [], [],
         [".spec.nodeSelector", ".spec.nodeSelector.z"]),
        ({"spec": {"tolerations": [{"key": "a"}]}}, {"spec": {"tolerations": [{"key": "b"}]}},
         [], [".spec.tolerations"], []),
        ({"spec": {"containers": [{"name": "c", "image": "1"}]}},
         {"spec": {"containers": [{"name": "c", "image": "2"}, {"name": "d"}]}},
         ['.spec.containers[name="d"]', '.spec.containers[name="d"].name'],
         ['.spec.containers[name="c"].image'], []),
        ({"a": 1}, {"a": 1}, [], [], []),
    ],
)
def test_compare(old: Any, new: Any, added: list[str], modified: list[str],
                 removed: list[str]) -> None:
    diff = fs.compare(old, new, BUILTIN)
    assert sorted(map(fs.dotted, diff.added)) == added
    assert sorted(map(fs.dotted, diff.modified)) == modified
    assert sorted(map(fs.dotted, diff.removed)) == removed
    assert diff.same == (old == new)


@pytest.mark.parametrize(
    ("obj", "path", "expect"),
    [
        ({"spec": {"a": 1, "b": 2}}, ("f:spec", "f:a"), {"spec": {"b": 2}}),
        ({"spec": {"l": [{"name": "x", "v": 1}, {"name": "y"}]}},
         ("f:spec", "f:l", 'k:{"name":"x"}'), {"spec": {"l": [{"name": "y"}]}}),
        ({"spec": {"l": [{"name": "x", "v": 1}]}},
         ("f:spec", "f:l", 'k:{"name":"x"}', "f:v"), {"spec": {"l": [{"name": "x"}]}}),
        ({"f": ["a", "b"]}, ("f:f", 'v:"a"'), {"f": ["b"]}),
        ({"spec": {}}, ("f:spec", "f:missing"), {"spec": {}}),
    ],
)
def test_remove(obj: Any, path: fs.Path, expect: Any) -> None:
    assert fs.remove(obj, path) == expect


@pytest.mark.parametrize(
    ("tree", "add", "remove", "expect"),
    [
        ({"f:a": {}}, [("f:b",)], [], {"f:a": {}, "f:b": {}}),
        ({"f:a": {}}, [("f:a", "f:x")], [], {"f:a": {".": {}, "f:x": {}}}),
        ({"f:a": {"f:x": {}}}, [("f:a",)], [], {"f:a": {".": {}, "f:x": {}}}),
        ({"f:a": {"f:x": {}, "f:y": {}}}, [], [("f:a", "f:x")], {"f:a": {"f:y": {}}}),
        ({"f:a": {"f:x": {}}}, [], [("f:a", "f:x")], {}),
        ({"f:a": {".": {}, "f:x": {}}}, [], [("f:a", "f:x")], {"f:a": {}}),
        ({"f:a": {".": {}, "f:x": {}}}, [], [("f:a",)], {"f:a": {"f:x": {}}}),
        ({"f:a": {}}, [], [("f:missing", "f:x")], {"f:a": {}}),
    ],
)
def test_edited_trees_match_the_set_they_stand_for(tree: dict[str, Any], add: list[fs.Path],
                                                   remove: list[fs.Path], expect: Any) -> None:
    got = fs.edited(tree, add=add, remove=remove)
    assert got == expect
    assert fs.from_fields_v1(got) == (fs.from_fields_v1(tree) - set(remove)) | set(add)
