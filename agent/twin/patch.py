"""The patch formats the API server accepts: JSON merge, JSON patch, strategic merge, apply.

Called by the store with the current object (never mutated) and a decoded patch body; returns a
new object. Server-side apply is approximated as a merge patch (no field managers, no
conflicts), except that a list the CRD schema declares `x-kubernetes-list-type: map` merges its
items by their keys (an item the apply leaves out is kept, as another manager's would be). Errors raise PatchError with the HTTP code the real server answers (400 for a
malformed patch, 422 for one that does not apply). Strategic merge knows the merge keys of the
built-in kinds the twin serves (containers, ports, env, volumes, ...); lists without a merge key
are replaced, as in Kubernetes (tolerations, for one, have no merge key there).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from agent.twin import crd_schema


class PatchType(StrEnum):
    MERGE = "application/merge-patch+json"
    JSON = "application/json-patch+json"
    STRATEGIC = "application/strategic-merge-patch+json"
    APPLY = "application/apply-patch+yaml"


class PatchError(ValueError):
    """A patch that is malformed (code 400) or does not apply (code 422)."""

    def __init__(self, message: str, *, code: int = 422) -> None:
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------- JSON merge patch (RFC 7386)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null deletes, anything else (arrays too) replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# ---------------------------------------------------------------- JSON patch (RFC 6902)


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}: must start with '/'", code=400)
    return [_unescape(t) for t in path[1:].split("/")]


def _index(container: list[Any], token: str, *, for_add: bool) -> int:
    if token == "-" and for_add:
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise PatchError(f"invalid array index {token!r}")
    i = int(token)
    limit = len(container) if for_add else len(container) - 1
    if i > limit:
        raise PatchError(f"array index {i} out of bounds")
    return i


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict):
            if token not in node:
                raise PatchError(f"doc is missing path: {path!r}")
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, for_add=False)]
        else:
            raise PatchError(f"doc is missing path: {path!r}")
    return node


def _get(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"doc is missing path: {path!r}")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, for_add=False)]
    raise PatchError(f"doc is missing path: {path!r}")


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, for_add=True), value)
    else:
        raise PatchError(f"doc is missing path: {path!r}")
    return doc


def _remove(doc: Any, path: str) -> tuple[Any, Any]:
    tokens = _pointer(path)
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"unable to remove nonexistent key: {last}: missing value")
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, last, for_add=False))
    raise PatchError(f"doc is missing path: {path!r}")


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 over a deep copy of `target`; a failed `test` or a missing path is a 422."""
    if not isinstance(operations, list):
        raise PatchError("json patch body must be a list of operations", code=400)
    doc = copy.deepcopy(target)
    for op in operations:
        if not isinstance(op, dict) or not isinstance(op.get("op"), str):
            raise PatchError(f"invalid json patch operation {op!r}", code=400)
        kind = op["op"]
        path = op.get("path")
        if not isinstance(path, str):
            raise PatchError(f"operation {kind!r} is missing a string 'path'", code=400)
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError(f"operation {kind!r} on {path!r} is missing 'value'", code=400)
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "remove":
            doc, _ = _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)
            doc, _ = (doc, None) if not _pointer(path) else _remove(doc, path)
            doc = _add(doc, path, copy.deepcopy(op["value"]))
        elif kind in ("move", "copy"):
            source = op.get("from")
            if not isinstance(source, str):
                raise PatchError(f"operation {kind!r} is missing a string 'from'", code=400)
            if kind == "move":
                doc, value = _remove(doc, source)
            else:
                value = copy.deepcopy(_get(doc, source))
            doc = _add(doc, path, value)
        elif kind == "test":
            if _get(doc, path) != op["value"]:
                raise PatchError(f"testing value {path} failed: test operation does not apply")
        else:
            raise PatchError(f"unexpected json patch operation {kind!r}", code=400)
    return doc


# ---------------------------------------------------------------- strategic merge patch

# list field name -> merge key, for the built-in kinds the twin serves.
_MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "ownerReferences": "uid",
    "conditions": "type",
    "addresses": "type",
    "resourceClaims": "name",
    "topologySpreadConstraints": "topologyKey",
}
# lists of scalars merged as sets.
_PRIMITIVE_MERGE = frozenset({"finalizers"})


MergeKeys = Mapping[str, str]
BUILTIN_MERGE_KEYS: MergeKeys = _MERGE_KEYS


def _merge_key(field: str, items: list[Any], keys: MergeKeys) -> str | None:
    if field == "ports":
        # container ports merge on containerPort, service ports on port.
        for item in items:
            if isinstance(item, dict) and "containerPort" in item:
                return "containerPort"
        return "port"
    return keys.get(field)


def _merge_list(field: str, current: list[Any], patch: list[Any], keys: MergeKeys) -> list[Any]:
    if field in _PRIMITIVE_MERGE:
        out = list(current)
        out.extend(v for v in patch if v not in out)
        return out
    key = _merge_key(field, [*current, *patch], keys)
    if key is None:
        return [v for v in patch if not (isinstance(v, dict) and "$patch" in v)]
    if any(isinstance(v, dict) and v.get("$patch") == "replace" for v in patch):
        return [_strip(v) for v in patch if not (isinstance(v, dict) and "$patch" in v)]
    out = [copy.deepcopy(v) for v in current]
    for item in patch:
        if not isinstance(item, dict):
            raise PatchError(f"strategic merge patch: {field} items must be objects", code=400)
        if key not in item:
            raise PatchError(f"map: {item} does not contain declared merge key: {key}", code=422)
        match = next(
            (i for i, v in enumerate(out) if isinstance(v, dict) and v.get(key) == item[key]), None
        )
        if item.get("$patch") == "delete":
            if match is not None:
                out.pop(match)
            continue
        if match is None:
            out.append(_strip(item))
        else:
            out[match] = strategic_merge(out[match], item, keys=keys)
    return out


def _strip(value: Any) -> Any:
    """Remove patch directives from a value being inserted whole."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not k.startswith("$") and v is not None}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def strategic_merge(target: Any, patch: Any, *, keys: MergeKeys = _MERGE_KEYS) -> Any:
    """Kubernetes strategic merge: maps merge, null deletes, keyed lists merge, others replace.
    `keys` names the merge key of each list field (the built-in kinds' by default)."""
    if not isinstance(patch, dict):
        raise PatchError("strategic merge patch body must be a JSON object", code=400)
    if patch.get("$patch") == "replace":
        return _strip(patch)
    if patch.get("$patch") == "delete":
        return {}
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue  # $setElementOrder/..., $retainKeys, $deleteFromPrimitiveList/...
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            result[key] = strategic_merge(result.get(key), value, keys=keys)
        elif isinstance(value, list) and isinstance(result.get(key), list):
            result[key] = _merge_list(key, result[key], value, keys)
        else:
            result[key] = _strip(value)
    return result


def _apply_merge(target: Any, patch: Any, schema: crd_schema.Schema | None) -> Any:
    """Merge patch semantics, except map lists (by the schema) merge their items by key."""
    if isinstance(patch, list):
        keys = crd_schema.map_keys(schema)
        if keys and isinstance(target, list):
            item_schema = crd_schema.items(schema)
            out = [copy.deepcopy(v) for v in target]
            for item in patch:
                if not isinstance(item, dict):
                    raise PatchError(f"an item of a map list must be an object, got {item!r}")
                at = next((i for i, v in enumerate(out) if isinstance(v, dict)
                           and all(v.get(k) == item.get(k) for k in keys)), None)  # fmt: skip
                if at is None:
                    out.append(_apply_merge(None, item, item_schema))
                else:
                    out[at] = _apply_merge(out[at], item, item_schema)
            return out
        return copy.deepcopy(patch)
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _apply_merge(result.get(key), value, crd_schema.child(schema, key))
    return result


def apply(
    target: dict[str, Any],
    body: Any,
    patch_type: PatchType,
    *,
    schema: crd_schema.Schema | None = None,
) -> Any:
    """Apply a decoded patch body of the given type to `target` (left unchanged). `schema` is the
    custom resource's structural schema, when its CRD declares one (map lists for apply)."""
    if patch_type is PatchType.MERGE:
        if not isinstance(body, dict):
            raise PatchError("merge patch body must be a JSON object", code=400)
        return merge_patch(target, body)
    if patch_type is PatchType.JSON:
        return json_patch(target, body)
    if patch_type is PatchType.STRATEGIC:
        return strategic_merge(target, body)
    if patch_type is PatchType.APPLY:
        # An approximation of server-side apply: no field ownership; merges like merge patch.
        if not isinstance(body, dict):
            raise PatchError("an apply patch must be a YAML or JSON object", code=400)
        applied = dict(body)
        if isinstance(applied.get("metadata"), dict):
            applied["metadata"] = {
                k: v for k, v in applied["metadata"].items() if k != "managedFields"
            }
        return _apply_merge(target, applied, schema)
    raise PatchError(f"patch type {patch_type} is not supported by the twin", code=415)
