"""Kubernetes JSONPath, the subset CRD printer columns use: `.a.b`, `['a.b']`, `[0]`, `[-1:]`,
`[*]` and filters `[?(@.type=="Ready")]` (with `==` / `!=` against a string, number or boolean).

Called by `tables` to compute the cells of a custom resource's `additionalPrinterColumns`, as the
API server's table convertor does (missing keys allowed: a path that finds nothing yields no
result, the cell is then null). `text` prints one result the way the JSONPath printer does (maps
and lists as compact JSON, booleans as true/false). Pure. It does not support ranges (`{range}`),
recursive descent (`..`) or unions; `compile` raises JsonPathError for them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Step = Callable[[list[Any]], list[Any]]


class JsonPathError(ValueError):
    """An expression outside the supported subset, or malformed."""


@dataclass(frozen=True)
class JsonPath:
    expression: str
    steps: tuple[Step, ...]

    def find(self, obj: Any) -> list[Any]:
        """Every value the path reaches in `obj`, in document order (empty when none)."""
        values = [obj]
        for step in self.steps:
            values = step(values)
            if not values:
                return []
        return values


def _child(key: str) -> Step:
    def step(values: list[Any]) -> list[Any]:
        return [v[key] for v in values if isinstance(v, Mapping) and key in v]

    return step


def _slice(start: int | None, stop: int | None, stride: int | None) -> Step:
    def step(values: list[Any]) -> list[Any]:
        out: list[Any] = []
        for v in values:
            if isinstance(v, list):
                out.extend(v[start:stop:stride])
        return out

    return step


def _index(i: int) -> Step:
    def step(values: list[Any]) -> list[Any]:
        out = []
        for v in values:
            if isinstance(v, list) and -len(v) <= i < len(v):
                out.append(v[i])
        return out

    return step


def _wildcard(values: list[Any]) -> list[Any]:
    out: list[Any] = []
    for v in values:
        if isinstance(v, list):
            out.extend(v)
        elif isinstance(v, Mapping):
            out.extend(v[k] for k in sorted(v))
    return out


_FILTER = re.compile(r"^\?\(@((?:\.[A-Za-z0-9_\-/]+)+)\s*(==|!=)\s*(.+)\)$")


def _literal(raw: str) -> Any:
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
        return raw[1:-1]
    if raw in ("true", "false"):
        return raw == "true"
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise JsonPathError(f"unsupported filter literal {raw!r}") from exc


def _filter(inner: str) -> Step:
    match = _FILTER.match(inner)
    if match is None:
        raise JsonPathError(f"unsupported filter [{inner}]")
    keys = match.group(1).split(".")[1:]
    op, want = match.group(2), _literal(match.group(3))

    def value_of(item: Any) -> tuple[bool, Any]:
        node = item
        for key in keys:
            if not isinstance(node, Mapping) or key not in node:
                return False, None
            node = node[key]
        return True, node

    def step(values: list[Any]) -> list[Any]:
        out = []
        for v in values:
            items = v if isinstance(v, list) else [v]
            for item in items:
                found, got = value_of(item)
                if found and ((got == want) == (op == "==")):
                    out.append(item)
        return out

    return step


def _bracket(inner: str) -> Step:
    inner = inner.strip()
    if inner == "*":
        return _wildcard
    if inner.startswith("?"):
        return _filter(inner)
    if len(inner) >= 2 and inner[0] == inner[-1] and inner[0] in "\"'":
        return _child(inner[1:-1])
    if ":" in inner:
        parts = inner.split(":")
        if len(parts) > 3:
            raise JsonPathError(f"bad slice [{inner}]")
        try:
            nums = [int(p) if p.strip() else None for p in parts] + [None] * (3 - len(parts))
        except ValueError as exc:
            raise JsonPathError(f"bad slice [{inner}]") from exc
        return _slice(nums[0], nums[1], nums[2])
    try:
        return _index(int(inner))
    except ValueError as exc:
        raise JsonPathError(f"unsupported subscript [{inner}]") from exc


def compile_path(expression: str) -> JsonPath:
    """Parse an expression such as `.status.conditions[?(@.type=="Complete")].status`; the
    braces kubectl's `-o jsonpath` takes (`{.a}`) are accepted too."""
    text = expression.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    if not text.startswith(".") and not text.startswith("["):
        raise JsonPathError(f"{expression!r}: a JSONPath must start with '.' or '['")
    if ".." in text:
        raise JsonPathError(f"{expression!r}: recursive descent is not supported")
    steps: list[Step] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == ".":
            j = i + 1
            name = []
            while j < len(text) and text[j] not in ".[":
                if text[j] == "\\" and j + 1 < len(text):
                    j += 1
                name.append(text[j])
                j += 1
            key = "".join(name)
            if key == "*":
                steps.append(_wildcard)
            elif key:
                steps.append(_child(key))
            i = j
        elif char == "[":
            depth, j = 0, i
            while j < len(text):
                if text[j] == "[":
                    depth += 1
                elif text[j] == "]":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            if j >= len(text):
                raise JsonPathError(f"{expression!r}: unclosed '['")
            steps.append(_bracket(text[i + 1 : j]))
            i = j + 1
        else:
            raise JsonPathError(f"{expression!r}: unexpected {char!r} at {i}")
    return JsonPath(expression, tuple(steps))


def text(value: Any) -> str:
    """One result as the JSONPath printer writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping | list):
        return json.dumps(value, separators=(",", ":"))
    if value is None:
        return "<nil>"
    return str(value)
