"""Build a typed settings dataclass from plain data (a parsed file with its overrides applied).

Who calls it: `agent.settings.loader` (the agent's file and `zonemedic diagnose --config`), and
whoever builds one section from a mapping (`build(Settings, data)`). It converts each value to its
field's annotated type, checks the bound written in the annotation (`agent.settings.bounds`), and
rejects unknown keys, wrong types and values out of range by name (`database.url: expected a
string, got 3`); every problem is collected, in the data's order, into one `ConfigError`
(`problems`). A section's rules across keys run in its own `__post_init__`. Numbers and durations
go through `agent.parsing.numbers` (ASCII digits, bounded). What it does not do: read a file or
the environment (`agent.settings.loader` does), or know any section by name.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from enum import StrEnum
from functools import partial
from typing import Annotated, Any, TypeVar

from agent.errors import ConfigError
from agent.parsing import numbers
from agent.parsing.member import member
from agent.parsing.numbers import NumberError
from agent.settings.bounds import Within


def parse_duration(value: object, *, key: str = "duration") -> timedelta:
    """Parse `500ms`, `15s`, `30m`, `2h`, `7d` (or a bare number of seconds) into a timedelta,
    bounded by `agent.parsing.numbers.MAX_DURATION`; `ConfigError` names the key."""
    try:
        return numbers.parse_duration(value, field=key)
    except NumberError as exc:
        raise ConfigError(str(exc)) from None


T = TypeVar("T")


def _convert(tp: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    if origin is Annotated:
        inner, *rules = typing.get_args(tp)
        converted = _convert(inner, value, key)
        for rule in rules:
            problem = rule.problem(converted) if isinstance(rule, Within) else None
            if problem is not None:
                raise ConfigError(f"{key}: {problem}, got {numbers.shown(value)}")
        return converted
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, key)
    if tp is timedelta:
        return parse_duration(value, key=key)
    if isinstance(tp, type) and issubclass(tp, StrEnum):
        try:
            return tp(value)
        except ValueError:
            known = ", ".join(m.value for m in tp)
            raise ConfigError(f"{key}: expected one of {known}, got {value!r}") from None
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true or false, got {numbers.shown(value)}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return _number(numbers.parse_int, value, key, minimum=numbers.INT64_MIN)
        raise ConfigError(f"{key}: expected an integer, got {numbers.shown(value)}")
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return _number(numbers.parse_float, value, key, minimum=-1e15)
        raise ConfigError(f"{key}: expected a number, got {numbers.shown(value)}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{key}: expected a string, got {numbers.shown(value)}")
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list, got {numbers.shown(value)}")
        return _collect(
            partial(_convert, item_tp, v, f"{key}[{i}]") for i, v in enumerate(value)
        )
    if origin is dict:
        key_tp, val_tp = typing.get_args(tp)
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping, got {numbers.shown(value)}")
        keys = _collect(partial(_convert, key_tp, k, key) for k in value)
        values = _collect(partial(_convert, val_tp, v, member(key, str(k))) for k, v in value.items())
        return dict(zip(keys, values, strict=True))
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return build(tp, value, prefix=key)
    raise ConfigError(f"{key}: unsupported setting type {tp!r}")  # pragma: no cover


def _number(parse: Any, value: Any, key: str, *, minimum: Any) -> Any:
    try:
        return parse(value, field=key, minimum=minimum)
    except NumberError as exc:
        raise ConfigError(str(exc)) from None


def _collect(steps: Iterable[Callable[[], Any]]) -> list[Any]:
    """Run every conversion step; raise one ConfigError listing every problem of all of them."""
    results: list[Any] = []
    problems: list[str] = []
    for step in steps:
        try:
            results.append(step())
        except ConfigError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ConfigError(*problems)
    return results


def build(cls: type[T], data: object, *, prefix: str = "") -> T:
    """Build dataclass `cls` from a mapping, rejecting unknown keys, wrong types and values out of
    bounds by name. Every problem is collected: the `ConfigError` lists them all (`.problems`)."""
    where = prefix or "config"
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {numbers.shown(data)}")
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    problems: list[str] = []
    given: set[str] = set()
    for raw_key, value in data.items():
        name = str(raw_key)
        given.add(name)
        key = member(prefix, name)
        if name in fields and fields[name].metadata.get("environment_only"):
            problems.append(f"{key}: not a config key (secrets come from files or the environment)")
            continue
        if name not in fields:
            known = ", ".join(sorted(n for n, f in fields.items()
                                     if not f.metadata.get("environment_only")))
            problems.append(f"{key}: unknown key (known keys: {known})")
            continue
        try:
            kwargs[name] = _convert(hints[name], value, key)
        except ConfigError as exc:
            problems.extend(exc.problems)
    missing = [
        n
        for n, f in fields.items()
        if n not in given
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    for name in missing:
        problems.append(f"{prefix}.{name}: required key is missing" if prefix else
                        f"{name}: required key is missing")
    if problems:
        raise ConfigError(*problems)
    return cls(**kwargs)  # a section's own cross-key rules raise ConfigError naming the key
