"""Whole numbers, decimal numbers, durations and byte sizes from user input, ASCII digits only, bounded.

Who calls it: the settings loader, the playbook schema and cron parser, snapshot and policy manifest
parsing, the HTTP API's query and path parameters and the CLI's flags. Each caller names the field
(`http.port`, `limit`, `--since`, `spec.containers[0].resources.limits.nvidia.com/gpu`) and its
bounds; a value that is not a number, uses non-ASCII digits (`"٨٠"`, `"²"`), is not finite (`.inf`,
`.nan`), or lies outside the bounds raises `NumberError` naming the field and the bounds.

Rules: a whole number is an `int` (never a `bool`) or a string of ASCII digits with an optional
leading `-` (only where the minimum is negative) and at most `MAX_DIGITS` digits, so no huge
integer is ever built from text. A duration is a non-negative number of seconds, or a number with
one unit `ms`, `s`, `m`, `h`, `d` (text needs the unit: `500ms`, `1.5h`, `7d`), at most `MAX_DURATION` unless the caller
gives a smaller bound. A size is bytes, or a whole number with `K`, `M`, `G` (powers of 1024, also
spelled `Ki`, `KiB`, `KB`, ...). What it does not do: know any field's meaning or default.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

from agent.errors import InputError

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
MAX_DIGITS = 19
MAX_DURATION = timedelta(days=3650)
MAX_SHOWN = 40  # characters of a bad value quoted back in an error

_INTEGER = re.compile(r"-?[0-9]{1,19}", re.ASCII)
_DECIMAL = re.compile(r"-?[0-9]{1,19}(?:\.[0-9]{1,19})?", re.ASCII)
_DURATION = re.compile(r"\s*([0-9]{1,19}(?:\.[0-9]{1,19})?)\s*(ms|s|m|h|d)\s*", re.ASCII)
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SIZE = re.compile(r"\s*([0-9]{1,19})\s*(?:([KMG])(?:i?B?)?|B)?\s*", re.ASCII | re.IGNORECASE)
_SIZE_UNITS = {None: 1, "K": 1024, "M": 1024**2, "G": 1024**3}


class NumberError(InputError):
    """A number, duration or size is malformed or out of bounds; the message names the field."""


def shown(value: object) -> str:
    """`repr(value)`, cut to `MAX_SHOWN` characters (hostile input can be megabytes long)."""
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else f"{text[: MAX_SHOWN - 3]}..."


def _bounds(minimum: int, maximum: int) -> str:
    return f"at least {minimum}" if maximum >= INT64_MAX else f"from {minimum} to {maximum}"


def parse_int(
    value: object, *, field: str, minimum: int = 0, maximum: int = INT64_MAX
) -> int:
    """A whole number between `minimum` and `maximum` (inclusive) from an int or ASCII digits."""
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str):
        text = value.strip()
        if _INTEGER.fullmatch(text) and (minimum < 0 or not text.startswith("-")):
            number = int(text)
    if number is None:
        raise NumberError(
            f"{field}: expected a whole number {_bounds(minimum, maximum)}, got {shown(value)}"
        )
    if number > maximum >= INT64_MAX:
        raise NumberError(f"{field}: must be at most {maximum}, got {shown(number)}")
    if not minimum <= number <= maximum:
        raise NumberError(f"{field}: must be {_bounds(minimum, maximum)}, got {shown(number)}")
    return number


def parse_float(
    value: object, *, field: str, minimum: float = 0.0, maximum: float = 1e15
) -> float:
    """A finite number between `minimum` and `maximum` (inclusive) from an int, float or ASCII text."""
    number: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value) if not isinstance(value, int) or abs(value) <= 2**63 else math.inf
    elif isinstance(value, str) and _DECIMAL.fullmatch(value.strip()):
        number = float(value.strip())
    if number is None or not math.isfinite(number):
        raise NumberError(f"{field}: expected a number from {minimum:g} to {maximum:g}, got {shown(value)}")
    if not minimum <= number <= maximum:
        raise NumberError(f"{field}: must be from {minimum:g} to {maximum:g}, got {number:g}")
    return number


def parse_duration(
    value: object,
    *,
    field: str,
    minimum: timedelta = timedelta(0),
    maximum: timedelta = MAX_DURATION,
) -> timedelta:
    """`500ms`, `15s`, `30m`, `2h`, `7d` or a bare number of seconds, within the bounds."""
    seconds: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value) if not isinstance(value, int) or abs(value) <= 2**63 else math.inf
    elif isinstance(value, str):
        match = _DURATION.fullmatch(value)
        if match:
            seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    if seconds is None or not math.isfinite(seconds):
        raise NumberError(
            f"{field}: expected a duration like 500ms, 15s, 30m, 2h or 7d, got {shown(value)}"
        )
    if seconds < 0:
        raise NumberError(f"{field}: a duration cannot be negative, got {shown(value)}")
    if seconds > maximum.total_seconds():
        raise NumberError(f"{field}: at most {_human(maximum)}, got {shown(value)}")
    duration = timedelta(seconds=seconds)
    if duration < minimum:
        raise NumberError(f"{field}: at least {_human(minimum)}, got {shown(value)}")
    return duration


def parse_size(value: object, *, field: str, maximum: int = 1 << 40) -> int:
    """A byte count: `1048576`, `512K`, `256M`, `2G` (1024-based, `Ki`/`KiB`/`KB` alike)."""
    size: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    elif isinstance(value, str):
        match = _SIZE.fullmatch(value)
        if match:
            unit = match.group(2).upper() if match.group(2) else None
            size = int(match.group(1)) * _SIZE_UNITS[unit]
    if size is None:
        raise NumberError(f"{field}: expected a size like 1048576, 512K, 256M or 2G, got {shown(value)}")
    if not 1 <= size <= maximum:
        raise NumberError(f"{field}: must be from 1 byte to {maximum} bytes, got {shown(value)}")
    return size


def _human(duration: timedelta) -> str:
    seconds = duration.total_seconds()
    for unit, factor in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= factor and seconds % factor == 0:
            return f"{int(seconds // factor)}{unit}"
    return f"{seconds:g}s"
