"""Field sets as server-side apply tracks them: the paths of an object, compared, in FieldsV1.

A path is a tuple of elements written as the API server writes them in `fieldsV1`: `f:<name>` for
an object field, `k:{"name":"x"}` for an item of a keyed list (the key fields as compact JSON,
sorted), `v:"x"` for an item of a set list (finalizers), and the whole list for an atomic list
(tolerations, args, a CRD list without a list type). Nested objects are plain descents; a node is
a *member* of a set (FieldsV1's `".": {}`) when it is a scalar, a list item, an atomic list or
struct, an empty object, or an object that appeared as a whole where the typed empty object of a
built-in kind would not hold it (a map such as labels, a pointer struct such as affinity). The
typed kinds' non-pointer structs (metadata, spec, template, strategy, resources) are never members.

Used by managed_fields.py. Pure: no store, no clock. It does not know managers or entries.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from agent.twin import crd_schema
from agent.twin.patch import BUILTIN_MERGE_KEYS

Path = tuple[str, ...]
FieldSet = frozenset[Path]
EMPTY: FieldSet = frozenset()
MEMBER = "."

# Non-pointer structs of the built-in kinds: present in the typed empty object, never members.
_STRUCTS = frozenset({"metadata", "spec", "status", "template", "strategy", "resources",
                      "jobTemplate", "updateStrategy"})  # fmt: skip
# Structs the built-in schema declares atomic (`+structType=atomic`): owned as a whole.
_ATOMIC_STRUCTS = frozenset({"labelSelector", "namespaceSelector",
                             "requiredDuringSchedulingIgnoredDuringExecution"})  # fmt: skip
_ATOMIC_LISTS = frozenset({"tolerations", "args", "command", "nodeSelectorTerms",
                           "matchExpressions", "values"})  # fmt: skip
_SET_LISTS = frozenset({"finalizers"})
# Lists the typed empty object holds (serialized without omitempty): never members themselves.
_PRESENT_LISTS = frozenset({"containers"})
_EXTRA_KEYS: dict[str, tuple[str, ...]] = {
    "topologySpreadConstraints": ("topologyKey", "whenUnsatisfiable"),
}


@dataclass(frozen=True)
class Comparison:
    """What changed between two objects, as field sets."""

    added: FieldSet
    modified: FieldSet
    removed: FieldSet

    @property
    def same(self) -> bool:
        return not (self.added or self.modified or self.removed)

    @property
    def changed(self) -> FieldSet:
        """Added or modified: what the writer now sets."""
        return self.added | self.modified


class Typing:
    """Where the shape of an object comes from: the built-in rules, or a CRD's schema."""

    def __init__(self, *, builtin: bool, schema: crd_schema.Schema | None) -> None:
        self.builtin = builtin
        self.schema = schema

    def child(self, schema: crd_schema.Schema | None, key: str) -> crd_schema.Schema | None:
        return None if self.builtin else crd_schema.child(schema, key)

    def list_keys(self, field: str, items: list[Any], schema: crd_schema.Schema | None) -> (
        tuple[str, ...] | str
    ):
        """The key fields of a keyed list, "set" for a set list, or "atomic"."""
        if not self.builtin:
            list_type = (schema or {}).get("x-kubernetes-list-type")
            if list_type == "map":
                return crd_schema.map_keys(schema)
            return "set" if list_type == "set" else "atomic"
        if field in _SET_LISTS:
            return "set"
        if field in _ATOMIC_LISTS or not all(isinstance(i, dict) for i in items):
            return "atomic"
        if field == "ports":
            port = "containerPort" if any("containerPort" in i for i in items) else "port"
            return (port, "protocol")
        if field in _EXTRA_KEYS:
            return _EXTRA_KEYS[field]
        key = BUILTIN_MERGE_KEYS.get(field)
        return (key,) if key else "atomic"

    def atomic_struct(self, parent: str, key: str) -> bool:
        if not self.builtin:
            return False
        return key in _ATOMIC_STRUCTS or (key == "selector" and parent == "spec")

    def struct(self, key: str) -> bool:
        return self.builtin and key in _STRUCTS

    def present_list(self, key: str) -> bool:
        return self.builtin and key in _PRESENT_LISTS


def _item_element(item: Any, keys: tuple[str, ...] | str) -> str:
    if keys == "set":
        return "v:" + orjson.dumps(item).decode()
    assert isinstance(keys, tuple)
    fields = {k: item.get(k) for k in keys if isinstance(item, dict) and k in item}
    if keys in (("containerPort", "protocol"), ("port", "protocol")):
        fields.setdefault("protocol", "TCP")  # the defaulted key part, as the server keys it
    return "k:" + orjson.dumps(fields, option=orjson.OPT_SORT_KEYS).decode()


def _keyed(items: list[Any], keys: tuple[str, ...] | str) -> dict[str, Any]:
    return {_item_element(item, keys): item for item in items}


def paths_of(value: Any, typing: Typing, *, path: Path = (), schema: Any = None,
             parent: str = "", whole: bool = True) -> set[Path]:  # fmt: skip
    """Every member path of `value` at `path`: scalars, list items, atomic lists and structs,
    empty objects (what an apply configuration sets, with `whole` False); with `whole` (a value
    that appeared as a whole), the objects and lists themselves too, but for the typed kinds'
    structs and always-present lists."""
    out: set[Path] = set()
    schema = typing.schema if not path else schema
    field = path[-1][2:] if path and path[-1].startswith("f:") else ""
    if isinstance(value, dict):
        if path and (not value or typing.atomic_struct(parent, field)):
            out.add(path)
            return out
        if path and whole and not typing.struct(field):
            out.add(path)
        for key, child in value.items():
            out |= paths_of(child, typing, path=(*path, f"f:{key}"),
                            schema=typing.child(schema, key), parent=field, whole=whole)  # fmt: skip
        return out
    if isinstance(value, list):
        keys = typing.list_keys(field, value, schema)
        if keys == "atomic" or not path:
            out.add(path)
            return out
        if whole and not typing.present_list(field):
            out.add(path)
        item_schema = crd_schema.items(schema) if not typing.builtin else None
        for element, item in _keyed(value, keys).items():
            item_path = (*path, element)
            out.add(item_path)
            if isinstance(item, dict):
                for key, child in item.items():
                    out |= paths_of(child, typing, path=(*item_path, f"f:{key}"),
                                    schema=typing.child(item_schema, key), parent=field,
                                    whole=whole)  # fmt: skip
        return out
    out.add(path)
    return out


def compare(old: Any, new: Any, typing: Typing, *, path: Path = (), schema: Any = None,
            parent: str = "") -> Comparison:  # fmt: skip
    """Added, modified and removed paths from `old` to `new` (None: absent)."""
    added: set[Path] = set()
    modified: set[Path] = set()
    removed: set[Path] = set()
    schema = typing.schema if not path else schema
    field = path[-1][2:] if path and path[-1].startswith("f:") else ""
    if old == new:  # the common case of a subtree a write leaves alone: one C-level comparison
        return Comparison(EMPTY, EMPTY, EMPTY)
    if old is None:
        return Comparison(frozenset(paths_of(new, typing, path=path, schema=schema,
                                             parent=parent)), EMPTY, EMPTY)  # fmt: skip
    if new is None:
        return Comparison(EMPTY, EMPTY, frozenset(paths_of(old, typing, path=path, schema=schema,
                                                           parent=parent)))  # fmt: skip
    both_dicts = isinstance(old, dict) and isinstance(new, dict)
    if both_dicts and path and typing.atomic_struct(parent, field):
        return Comparison(EMPTY, frozenset({path}) if old != new else EMPTY, EMPTY)
    if both_dicts:
        for key in (*old, *(k for k in new if k not in old)):
            sub = compare(old.get(key), new.get(key), typing, path=(*path, f"f:{key}"),
                          schema=typing.child(schema, key), parent=field)  # fmt: skip
            added |= sub.added
            modified |= sub.modified
            removed |= sub.removed
        return Comparison(frozenset(added), frozenset(modified), frozenset(removed))
    if isinstance(old, list) and isinstance(new, list) and path:
        keys = typing.list_keys(field, [*old, *new], schema)
        if keys != "atomic":
            item_schema = crd_schema.items(schema) if not typing.builtin else None
            olds, news = _keyed(old, keys), _keyed(new, keys)
            for element in (*olds, *(e for e in news if e not in olds)):
                item_path = (*path, element)
                a, b = olds.get(element), news.get(element)
                if a is None or b is None:
                    side = paths_of(a if b is None else b, typing, path=item_path,
                                    schema=item_schema, parent=field) | {item_path}  # fmt: skip
                    (added if a is None else removed).update(side)
                    continue
                if isinstance(a, dict) and isinstance(b, dict):
                    sub = compare({k: v for k, v in a.items()}, b, typing, path=item_path,
                                  schema=item_schema, parent=field)  # fmt: skip
                    added |= sub.added - {item_path}
                    modified |= sub.modified - {item_path}
                    removed |= sub.removed - {item_path}
                elif a != b:
                    modified.add(item_path)
            return Comparison(frozenset(added), frozenset(modified), frozenset(removed))
    if type(old) is not type(new) and (isinstance(old, dict | list) or isinstance(new, dict | list)):
        return Comparison(frozenset(paths_of(new, typing, path=path, schema=schema, parent=parent)),
                          EMPTY, frozenset(paths_of(old, typing, path=path, schema=schema,
                                                    parent=parent)))  # fmt: skip
    return Comparison(EMPTY, frozenset({path}) if old != new else EMPTY, EMPTY)


def without(paths: Iterable[Path], prefixes: Iterable[Path]) -> FieldSet:
    """The paths that do not start with any of `prefixes`."""
    cut = tuple(prefixes)
    return frozenset(p for p in paths if not any(p[: len(c)] == c for c in cut))


def under(paths: Iterable[Path], prefix: Path) -> FieldSet:
    """The paths at or below `prefix`."""
    return frozenset(p for p in paths if p[: len(prefix)] == prefix)


def to_fields_v1(paths: Iterable[Path]) -> dict[str, Any]:
    """FieldsV1 JSON: a tree of elements, `".": {}` marking a member that has children."""
    tree: dict[str, Any] = {}
    members = set(paths)
    for path in sorted(members):
        node = tree
        for element in path:
            node = node.setdefault(element, {})
    for path in members:
        node = tree
        for element in path:
            node = node[element]
        if node:
            node[MEMBER] = {}
    return _sorted(tree)


def _sorted(tree: dict[str, Any]) -> dict[str, Any]:
    return {k: _sorted(tree[k]) for k in sorted(tree, key=lambda e: (e != MEMBER, e))}


def holds(tree: Mapping[str, Any], path: Path) -> bool:
    """Whether the FieldsV1 tree has `path` as a member (without parsing the whole tree)."""
    node: Any = tree
    for element in path:
        if not isinstance(node, Mapping) or element not in node:
            return False
        node = node[element]
    return isinstance(node, Mapping) and (not node or MEMBER in node)


def edited(tree: Mapping[str, Any], *, add: Iterable[Path] = (),
           remove: Iterable[Path] = ()) -> dict[str, Any]:  # fmt: skip
    """A FieldsV1 tree with members removed and added, copying only the nodes on their paths
    (the rest is shared with `tree`, which is left unchanged)."""
    out: dict[str, Any] = dict(tree)
    for path in sorted(remove, key=len, reverse=True):
        out = _removed(out, path)
    for path in add:
        out = _added(out, path)
    return out


def _removed(node: dict[str, Any], path: Path) -> dict[str, Any]:
    element, rest = path[0], path[1:]
    child = node.get(element)
    if not isinstance(child, Mapping):
        return node
    out = dict(node)
    if rest:
        sub = _removed(dict(child), rest)
        if sub:
            out[element] = {} if set(sub) == {MEMBER} else sub  # a member with no children
        else:
            del out[element]  # nothing left below, and it was no member itself
    elif len(child) > 1 or (child and MEMBER not in child):
        out[element] = {k: v for k, v in child.items() if k != MEMBER}  # still holds children
    else:
        del out[element]
    return out


def _added(node: dict[str, Any], path: Path) -> dict[str, Any]:
    element, rest = path[0], path[1:]
    out = dict(node)
    child = node.get(element)
    if not rest:
        if isinstance(child, Mapping) and child and MEMBER not in child:
            out[element] = {MEMBER: {}, **child}
        elif not isinstance(child, Mapping):
            out[element] = {}
        return out
    base: dict[str, Any] = {}
    if isinstance(child, Mapping):
        base = dict(child) if child else {MEMBER: {}}  # a leaf member keeps its membership
    out[element] = _added(base, rest)
    return out


def from_fields_v1(tree: Mapping[str, Any], prefix: Path = ()) -> set[Path]:
    """The member paths of a FieldsV1 tree (the inverse of to_fields_v1)."""
    out: set[Path] = set()
    for element, child in tree.items():
        if element == MEMBER:
            out.add(prefix)
            continue
        path = (*prefix, element)
        if isinstance(child, Mapping) and child:
            out |= from_fields_v1(child, path)
        else:
            out.add(path)
    return out


def dotted(path: Path) -> str:
    """A path as the server names it in a conflict: `.spec.replicas`, `.spec.containers[name="x"]`."""
    out = ""
    for element in path:
        kind, text = element[:2], element[2:]
        if kind == "f:":
            out += f".{text}"
        elif kind == "k:":
            keyed = orjson.loads(text)
            out += "[" + ",".join(f"{k}={orjson.dumps(v).decode()}" for k, v in keyed.items()) + "]"
        elif kind == "v:":
            out += f"[={text}]"
        else:
            out += f"[{text}]"
    return out


def remove(obj: Any, path: Path) -> Any:
    """A copy of `obj` without the node at `path` (unchanged when it is not there)."""
    if not path:
        return None
    element, rest = path[0], path[1:]
    if isinstance(obj, dict) and element.startswith("f:"):
        key = element[2:]
        if key not in obj:
            return obj
        out = dict(obj)
        if rest:
            out[key] = remove(obj[key], rest)
        else:
            del out[key]
        return out
    if isinstance(obj, list) and element[:2] in ("k:", "v:"):
        out_list = []
        for item in obj:
            if _matches(item, element):
                if rest:
                    out_list.append(remove(item, rest))
                continue
            out_list.append(item)
        return out_list
    return obj


def _matches(item: Any, element: str) -> bool:
    if element.startswith("v:"):
        return bool(orjson.dumps(item).decode() == element[2:])
    wanted = orjson.loads(element[2:])
    return isinstance(item, dict) and all(item.get(k, "TCP" if k == "protocol" else None) == v
                                          for k, v in wanted.items())  # fmt: skip
