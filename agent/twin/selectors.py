"""Label and field selector strings, parsed the way the Kubernetes API server parses them.

Label selectors: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k` (exists), `!k`,
joined by commas. Field selectors: `path=v`, `path==v`, `path!=v` joined by commas, over the
fields a resource allows. Used by the store (list, watch). Parsing errors raise SelectorError,
which the store turns into a 400 BadRequest; nothing here knows about HTTP.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class SelectorError(ValueError):
    """A selector string that does not parse; the message names the bad part."""


class Operator(StrEnum):
    EQUALS = "="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"


_KEY = re.compile(
    r"^([a-zA-Z0-9]([-a-zA-Z0-9.]*[a-zA-Z0-9])?/)?[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$"
)
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: Operator
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        has = self.key in labels
        if self.operator is Operator.EXISTS:
            return has
        if self.operator is Operator.DOES_NOT_EXIST:
            return not has
        if self.operator in (Operator.EQUALS, Operator.IN):
            return has and labels[self.key] in self.values
        return not has or labels[self.key] not in self.values


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


def parse_labels(text: str | None) -> tuple[Requirement, ...]:
    """Parse a label selector; an empty or missing one selects everything."""
    if text is None or not text.strip():
        return ()
    out: list[Requirement] = []
    for raw in _split_top(text):
        part = raw.strip()
        if not part:
            raise SelectorError(f"empty requirement in selector {text!r}")
        if m := _SET_RE.match(part):
            key = _check_key(m.group(1), text)
            op = Operator.IN if m.group(2) == "in" else Operator.NOT_IN
            values = frozenset(_check_value(v.strip(), text) for v in m.group(3).split(","))
            out.append(Requirement(key, op, values))
        elif m := _EQ_RE.match(part):
            key = _check_key(m.group(1), text)
            op = Operator.NOT_EQUALS if m.group(2) == "!=" else Operator.EQUALS
            out.append(Requirement(key, op, frozenset({_check_value(m.group(3), text)})))
        elif part.startswith("!"):
            out.append(Requirement(_check_key(part[1:].strip(), text), Operator.DOES_NOT_EXIST))
        elif " " not in part and "(" not in part:
            out.append(Requirement(_check_key(part, text), Operator.EXISTS))
        else:
            raise SelectorError(f"unable to parse requirement {part!r} in selector {text!r}")
    return tuple(out)


def labels_match(requirements: tuple[Requirement, ...], labels: Mapping[str, str] | None) -> bool:
    if not requirements:
        return True
    present = labels or {}
    return all(r.matches(present) for r in requirements)


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


def fields_match(requirements: tuple[FieldRequirement, ...], obj: Mapping[str, Any]) -> bool:
    return all((field_value(obj, r.path) == r.value) == r.equal for r in requirements)


def matcher(
    label_selector: str | None, field_selector: str | None, allowed_fields: tuple[str, ...]
) -> Callable[[Mapping[str, Any]], bool] | None:
    """One predicate over whole objects for both selectors; None when both select everything."""
    labels = parse_labels(label_selector)
    fields = parse_fields(field_selector, allowed_fields)
    if not labels and not fields:
        return None

    def match(obj: Mapping[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        return labels_match(labels, meta.get("labels")) and fields_match(fields, obj)

    return match
