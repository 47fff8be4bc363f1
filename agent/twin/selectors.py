"""Label and field selector strings, parsed the way the Kubernetes API server parses them.

Label selectors: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k` (exists), `!k`,
joined by commas. Field selectors: `path=v`, `path==v`, `path!=v` joined by commas, over the
fields a resource allows. Used by the store (list, watch). A label selector string becomes the
core's `agent.model.selector.LabelSelector` (`=`/`==` is In, `!=` is NotIn, `k` Exists, `!k`
DoesNotExist), so strings and `matchExpressions` objects are matched by the same code. Parsing
errors raise SelectorError, which the store turns into a 400 BadRequest; nothing here knows about
HTTP.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.model.selector import LabelSelector, Requirement, SelectorOperator


class SelectorError(ValueError):
    """A selector string that does not parse; the message names the bad part."""


_KEY = re.compile(
    r"^([a-zA-Z0-9]([-a-zA-Z0-9.]*[a-zA-Z0-9])?/)?[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$"
)
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"unbalanced ')' in selector {text!r}")
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth:
        raise SelectorError(f"unclosed '(' in selector {text!r}")
    parts.append("".join(current))
    return parts


def _check_key(key: str, text: str) -> str:
    if not _KEY.match(key):
        raise SelectorError(f"invalid label key {key!r} in selector {text!r}")
    return key


def _check_value(value: str, text: str) -> str:
    if len(value) > 63 or not _VALUE.match(value):
        raise SelectorError(f"invalid label value {value!r} in selector {text!r}")
    return value


_SET_RE = re.compile(r"^\s*(\S+)\s+(in|notin)\s*\((.*)\)\s*$")
_EQ_RE = re.compile(r"^\s*([^=!\s]+)\s*(==|=|!=)\s*(\S*)\s*$")


def parse_labels(text: str | None) -> LabelSelector:
    """Parse a label selector; an empty or missing one selects everything."""
    if text is None or not text.strip():
        return LabelSelector()
    out: list[Requirement] = []
    for raw in _split_top(text):
        part = raw.strip()
        if not part:
            raise SelectorError(f"empty requirement in selector {text!r}")
        if m := _SET_RE.match(part):
            key = _check_key(m.group(1), text)
            op = SelectorOperator.IN if m.group(2) == "in" else SelectorOperator.NOT_IN
            values = frozenset(_check_value(v.strip(), text) for v in m.group(3).split(","))
            out.append(Requirement(key, op, values))
        elif m := _EQ_RE.match(part):
            key = _check_key(m.group(1), text)
            op = SelectorOperator.NOT_IN if m.group(2) == "!=" else SelectorOperator.IN
            out.append(Requirement(key, op, frozenset({_check_value(m.group(3), text)})))
        elif part.startswith("!"):
            key = _check_key(part[1:].strip(), text)
            out.append(Requirement(key, SelectorOperator.DOES_NOT_EXIST))
        elif " " not in part and "(" not in part:
            out.append(Requirement(_check_key(part, text), SelectorOperator.EXISTS))
        else:
            raise SelectorError(f"unable to parse requirement {part!r} in selector {text!r}")
    return LabelSelector(match_expressions=tuple(out))


@dataclass(frozen=True)
class FieldRequirement:
    path: str
    equal: bool
    value: str


def parse_fields(text: str | None, allowed: tuple[str, ...]) -> tuple[FieldRequirement, ...]:
    """Parse a field selector over metadata.name, metadata.namespace and `allowed` paths."""
    if text is None or not text.strip():
        return ()
    out: list[FieldRequirement] = []
    for raw in text.split(","):
        part = raw.strip()
        m = _EQ_RE.match(part)
        if not m:
            raise SelectorError(f"invalid selector: {text!r}; can't understand {part!r}")
        path, op, value = m.group(1), m.group(2), m.group(3)
        if path not in ("metadata.name", "metadata.namespace", *allowed):
            raise SelectorError(f"field label not supported: {path}")
        out.append(FieldRequirement(path, op != "!=", value))
    return tuple(out)


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string form of a dotted path in an object ("" when absent), as the server compares it."""
    node: Any = obj
    for step in path.split("."):
        if not isinstance(node, Mapping):
            return ""
        node = node.get(step)
    if node is None:
        return ""
    if isinstance(node, bool):
        return "true" if node else "false"
    return str(node)


FieldPaths = Mapping[str, tuple[str, ...]]


def selected_value(obj: Mapping[str, Any], label: str, paths: FieldPaths | None = None) -> str:
    """The value a field label selects: its own path, or the first non-empty of `paths[label]`
    (as kube-apiserver's field sets derive an Event's `source`)."""
    for path in (paths or {}).get(label, (label,)):
        value = field_value(obj, path)
        if value:
            return value
    return ""


def fields_match(
    requirements: tuple[FieldRequirement, ...],
    obj: Mapping[str, Any],
    paths: FieldPaths | None = None,
) -> bool:
    return all((selected_value(obj, r.path, paths) == r.value) == r.equal for r in requirements)


def matcher(
    label_selector: str | None,
    field_selector: str | None,
    allowed_fields: tuple[str, ...],
    paths: FieldPaths | None = None,
) -> Callable[[Mapping[str, Any]], bool] | None:
    """One predicate over whole objects for both selectors; None when both select everything."""
    labels = parse_labels(label_selector)
    fields = parse_fields(field_selector, allowed_fields)
    if labels.is_empty() and not fields:
        return None

    def match(obj: Mapping[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        return labels.matches(meta.get("labels") or {}) and fields_match(fields, obj, paths)

    return match
