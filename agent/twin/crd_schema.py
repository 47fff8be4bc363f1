"""What the API server does with a custom resource from its CRD's structural schema.

Called by the twin's write path (writes.py) for every write to a custom resource whose CRD the
store holds, and by the apply patch (patch.py) for map lists:
- `prune`: drop the fields the schema does not declare (unless `x-kubernetes-preserve-unknown-
  fields`), reporting each dropped path as the server's field validation names it
  (`spec.runtimePatches`, `spec.a[0].b`); `apiVersion`, `kind` and `metadata` stay;
- `apply_defaults`: fill in the declared `default` of each absent property of a present object;
- `transition_errors`: the `x-kubernetes-validations` rules `self == oldSelf` (immutable fields),
  evaluated as CEL transition rules are: only where the old and the new object both hold the
  value, object properties and map-list items (by their keys) correlated, other lists not;
- `child`, `items`, `map_keys`: walking a schema (what a map list is keyed by).
Other CEL rules are not evaluated here (the admission hooks of the kinds that need them check
them). Pure: JSON values in, new values out; inputs are not mutated.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Schema = Mapping[str, Any]
IMMUTABLE_RULE = "self == oldSelf"
_OPEN: Schema = {"x-kubernetes-preserve-unknown-fields": True}


@dataclass(frozen=True)
class FieldError:
    """A failed rule: the field's path, the schema type CEL names, and the rule's message."""

    path: str
    type: str
    message: str


def _preserves(schema: Schema | None) -> bool:
    return bool(schema and schema.get("x-kubernetes-preserve-unknown-fields"))


def child(schema: Schema | None, key: str) -> Schema | None:
    """The schema of property `key` (None: undeclared, pruned unless the parent preserves)."""
    if schema is None:
        return None
    props = schema.get("properties") or {}
    if key in props:
        found: Schema = props[key]
        return found
    extra = schema.get("additionalProperties")
    if isinstance(extra, Mapping):
        return extra
    return _OPEN if _preserves(schema) else None


def items(schema: Schema | None) -> Schema | None:
    found = (schema or {}).get("items")
    if isinstance(found, Mapping):
        return found
    return _OPEN if _preserves(schema) else None


def map_keys(schema: Schema | None) -> tuple[str, ...]:
    """The keys of an `x-kubernetes-list-type: map` list (empty for other lists)."""
    if not schema or schema.get("x-kubernetes-list-type") != "map":
        return ()
    return tuple(str(k) for k in schema.get("x-kubernetes-list-map-keys") or ())


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# --- pruning --------------------------------------------------------------------------------


def prune(obj: Mapping[str, Any], schema: Schema) -> tuple[dict[str, Any], list[str]]:
    """The object without undeclared fields, and the paths of the fields dropped."""
    dropped: list[str] = []
    out: dict[str, Any] = {}
    for key, value in obj.items():
        if key in ("apiVersion", "kind", "metadata"):
            out[key] = copy.deepcopy(value)
            continue
        sub = child(schema, key)
        if sub is None:
            dropped.append(key)
            continue
        out[key] = _prune_value(value, sub, key, dropped)
    return out, dropped


def _prune_value(value: Any, schema: Schema, path: str, dropped: list[str]) -> Any:
    if isinstance(value, Mapping):
        if not schema.get("properties") and not isinstance(
            schema.get("additionalProperties"), Mapping
        ):
            if _preserves(schema):
                return copy.deepcopy(dict(value))
            dropped.extend(_join(path, str(k)) for k in value)
            return {}
        out: dict[str, Any] = {}
        for key, sub_value in value.items():
            sub = child(schema, str(key))
            if sub is None:
                dropped.append(_join(path, str(key)))
                continue
            out[key] = _prune_value(sub_value, sub, _join(path, str(key)), dropped)
        return out
    if isinstance(value, list):
        item_schema = items(schema)
        if item_schema is None:
            return copy.deepcopy(value)
        return [_prune_value(v, item_schema, f"{path}[{i}]", dropped) for i, v in enumerate(value)]
    return value


# --- defaults -------------------------------------------------------------------------------


def apply_defaults(obj: Mapping[str, Any], schema: Schema) -> dict[str, Any]:
    """The object with the schema's defaults filled in where a property is absent."""
    out = _defaults(obj, schema)
    return dict(out) if isinstance(out, Mapping) else dict(obj)


def _defaults(value: Any, schema: Schema | None) -> Any:
    if schema is None:
        return copy.deepcopy(value)
    if isinstance(value, Mapping):
        out = {k: _defaults(v, child(schema, str(k))) for k, v in value.items()}
        for key, prop in (schema.get("properties") or {}).items():
            if key not in out and "default" in prop:
                out[key] = _defaults(copy.deepcopy(prop["default"]), prop)
        return out
    if isinstance(value, list):
        item_schema = items(schema)
        return [_defaults(v, item_schema) for v in value]
    return value


# --- transition rules -----------------------------------------------------------------------


def _immutable_message(schema: Schema) -> str | None:
    for rule in schema.get("x-kubernetes-validations") or ():
        if str(rule.get("rule", "")).replace(" ", "") == IMMUTABLE_RULE.replace(" ", ""):
            return str(rule.get("message") or "Invalid value")
    return None


def transition_errors(old: Any, new: Any, schema: Schema, path: str = "") -> list[FieldError]:
    """Every `self == oldSelf` rule the update breaks, outermost first."""
    errors: list[FieldError] = []
    message = _immutable_message(schema)
    if message is not None and old != new:
        errors.append(FieldError(path, str(schema.get("type", "object")), message))
        return errors
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key, value in new.items():
            if key in old and (sub := child(schema, str(key))) is not None:
                errors.extend(transition_errors(old[key], value, sub, _join(path, str(key))))
    elif isinstance(old, list) and isinstance(new, list) and (keys := map_keys(schema)):
        item_schema = items(schema)
        if item_schema is not None:
            before = {_key(v, keys): v for v in old if isinstance(v, Mapping)}
            for i, value in enumerate(new):
                if isinstance(value, Mapping) and _key(value, keys) in before:
                    errors.extend(transition_errors(before[_key(value, keys)], value,
                                                    item_schema, f"{path}[{i}]"))  # fmt: skip
    return errors


def _key(item: Mapping[str, Any], keys: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(item.get(k) for k in keys)


def type_name(schema: Schema | None) -> str:
    return str((schema or {}).get("type", "object"))
