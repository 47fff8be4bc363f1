"""Kubernetes label selectors: parse `{matchLabels, matchExpressions}` and match label maps.

Used by the policy evaluator (endpoint and peer selectors) and, later, by the twin's scheduler
(pod affinity). Keys are compared exactly as given: source prefixes such as Cilium's `k8s:` are the
caller's business (see `agent.policy`). Pure: no I/O, no knowledge of pods or policies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from agent.errors import PolicyError


class SelectorOperator(StrEnum):
    """The operators of a `matchExpressions` requirement."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


@dataclass(frozen=True, slots=True)
class Requirement:
    """One `matchExpressions` entry: `key <operator> values`."""

    key: str
    operator: SelectorOperator
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Kubernetes semantics: NotIn and DoesNotExist match when the key is absent."""
        value = labels.get(self.key)
        op = self.operator
        if op is SelectorOperator.IN:
            return value is not None and value in self.values
        if op is SelectorOperator.NOT_IN:
            return value is None or value not in self.values
        if op is SelectorOperator.EXISTS:
            return value is not None
        return value is None


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """matchLabels AND matchExpressions; an empty selector matches every label map."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """True when every matchLabels pair and every requirement holds for `labels`."""
        for key, value in self.match_labels:
            if labels.get(key) != value:
                return False
        return all(req.matches(labels) for req in self.match_expressions)

    def keys(self) -> frozenset[str]:
        """The label keys this selector reads."""
        return frozenset(k for k, _ in self.match_labels) | frozenset(
            r.key for r in self.match_expressions
        )

    def values(self) -> tuple[tuple[str, str], ...]:
        """Every (key, value) this selector compares a label with (matchLabels, In, NotIn)."""
        out = list(self.match_labels)
        for req in self.match_expressions:
            out.extend((req.key, value) for value in sorted(req.values))
        return tuple(out)

    def is_empty(self) -> bool:
        """True when the selector has no terms (it matches everything)."""
        return not self.match_labels and not self.match_expressions


def _fail(where: str, field: str, message: str) -> PolicyError:
    path = f"{where}.{field}" if where else field
    return PolicyError(f"{path}: {message}")


def parse_label_selector(obj: Any, *, where: str) -> LabelSelector:
    """Parse a Kubernetes LabelSelector object; `None` means the empty selector.

    Raises `PolicyError` whose message starts with `where` and the offending field, e.g.
    `spec.podSelector.matchExpressions[0].operator: unknown operator 'Inn'`.
    """
    if obj is None:
        return LabelSelector()
    if not isinstance(obj, Mapping):
        raise PolicyError(f"{where}: expected a label selector object, got {type(obj).__name__}")
    unknown = sorted(str(k) for k in obj if k not in ("matchLabels", "matchExpressions"))
    if unknown:
        raise _fail(where, unknown[0], "unknown selector field")
    return LabelSelector(
        match_labels=_parse_match_labels(obj.get("matchLabels"), where=where),
        match_expressions=_parse_expressions(obj.get("matchExpressions"), where=where),
    )


def _parse_match_labels(raw: Any, *, where: str) -> tuple[tuple[str, str], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise _fail(where, "matchLabels", f"expected a map, got {type(raw).__name__}")
    pairs: list[tuple[str, str]] = []
    for key, value in raw.items():
        if not isinstance(key, str) or not key:
            raise _fail(where, "matchLabels", f"label key {key!r} is not a non-empty string")
        if not isinstance(value, str):
            raise _fail(
                where, f"matchLabels.{key}", f"expected a string, got {type(value).__name__}"
            )
        pairs.append((key, value))
    return tuple(sorted(pairs))


def _parse_expressions(raw: Any, *, where: str) -> tuple[Requirement, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise _fail(where, "matchExpressions", f"expected a list, got {type(raw).__name__}")
    return tuple(
        _parse_requirement(
            item, where=f"{where}.matchExpressions[{i}]" if where else f"matchExpressions[{i}]"
        )
        for i, item in enumerate(raw)
    )


def _parse_requirement(item: Any, *, where: str) -> Requirement:
    if not isinstance(item, Mapping):
        raise PolicyError(f"{where}: expected an object, got {type(item).__name__}")
    key = item.get("key")
    if not isinstance(key, str) or not key:
        raise _fail(where, "key", "missing or not a non-empty string")
    raw_op = item.get("operator")
    if not isinstance(raw_op, str):
        raise _fail(where, "operator", "missing or not a string")
    try:
        operator = SelectorOperator(raw_op)
    except ValueError:
        raise _fail(where, "operator", f"unknown operator {raw_op!r}") from None
    raw_values = item.get("values")
    if raw_values is not None and not isinstance(raw_values, list):
        raise _fail(where, "values", f"expected a list, got {type(raw_values).__name__}")
    values: list[str] = []
    for i, value in enumerate(raw_values or []):
        if not isinstance(value, str):
            raise _fail(where, f"values[{i}]", f"expected a string, got {type(value).__name__}")
        values.append(value)
    if operator in (SelectorOperator.IN, SelectorOperator.NOT_IN) and not values:
        raise _fail(where, "values", f"operator {operator.value} needs at least one value")
    if operator in (SelectorOperator.EXISTS, SelectorOperator.DOES_NOT_EXIST) and values:
        raise _fail(where, "values", f"operator {operator.value} takes no values")
    return Requirement(key=key, operator=operator, values=frozenset(values))
