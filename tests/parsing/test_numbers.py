"""Numbers, durations and sizes from user input: ASCII digits only, bounded (table-driven), and fuzzed:
whatever the text, the answer is a value within the bounds or a NumberError naming the field."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.errors import InputError
from agent.parsing.numbers import (
    INT64_MAX,
    MAX_DURATION,
    NumberError,
    parse_duration,
    parse_float,
    parse_int,
    parse_size,
    shown,
)


@pytest.mark.parametrize(
    ("value", "bounds", "expected"),
    [
        ("80", (0, 65535), 80),
        (" 80 ", (0, 65535), 80),
        (80, (0, 65535), 80),
        ("0", (0, 10), 0),
        ("-5", (-10, 10), -5),
        ("9223372036854775807", (0, INT64_MAX), INT64_MAX),
    ],
)
def test_parse_int_accepts(value: object, bounds: tuple[int, int], expected: int) -> None:
    assert parse_int(value, field="f", minimum=bounds[0], maximum=bounds[1]) == expected


@pytest.mark.parametrize(
    ("value", "bounds", "message"),
    [
        ("²", (0, 10), "f: expected a whole number from 0 to 10, got '²'"),  # isdigit() is True
        ("٨٠", (0, 65535), "f: expected a whole number from 0 to 65535, got '٨٠'"),  # int() == 80
        ("８０", (0, 65535), "f: expected a whole number"),  # fullwidth digits
        ("1_000", (0, 10_000), "f: expected a whole number"),  # int() accepts underscores
        ("0x10", (0, 100), "f: expected a whole number"),
        ("1e3", (0, 10_000), "f: expected a whole number"),
        ("", (0, 10), "f: expected a whole number"),
        ("-1", (0, 10), "f: expected a whole number from 0 to 10, got '-1'"),
        ("70000", (0, 65535), "f: must be from 0 to 65535, got 70000"),
        ("9" * 20, (0, INT64_MAX), "f: expected a whole number at least 0"),
        ("9" * 5000, (0, 10), "f: expected a whole number from 0 to 10, got '99999"),
        (2**64, (0, INT64_MAX), "f: must be at most 9223372036854775807"),
        (True, (0, 10), "f: expected a whole number"),
        (1.0, (0, 10), "f: expected a whole number"),
        (None, (0, 10), "f: expected a whole number"),
        ([1], (0, 10), "f: expected a whole number"),
    ],
)
def test_parse_int_refuses_naming_the_field(
    value: object, bounds: tuple[int, int], message: str
) -> None:
    with pytest.raises(NumberError) as caught:
        parse_int(value, field="f", minimum=bounds[0], maximum=bounds[1])
    assert str(caught.value).startswith(message)
    assert len(str(caught.value)) < 200  # a hostile value is never echoed whole
    assert isinstance(caught.value, InputError)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("500ms", timedelta(milliseconds=500)),
        ("15s", timedelta(seconds=15)),
        ("1.5h", timedelta(hours=1.5)),
        ("7d", timedelta(days=7)),
        (" 30m ", timedelta(minutes=30)),
        (3, timedelta(seconds=3)),
        (2.5, timedelta(seconds=2.5)),
        ("3650d", MAX_DURATION),
    ],
)
def test_parse_duration_accepts(value: object, expected: timedelta) -> None:
    assert parse_duration(value, field="d") == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("99999999999d", "d: at most 3650d"),  # timedelta() would overflow
        ("3651d", "d: at most 3650d"),
        (float("inf"), "d: expected a duration"),  # YAML .inf
        (float("nan"), "d: expected a duration"),  # YAML .nan
        ("inf", "d: expected a duration"),
        ("nan", "d: expected a duration"),
        (2**70, "d: expected a duration"),
        (1e300, "d: at most 3650d"),
        ("٧d", "d: expected a duration"),
        ("²s", "d: expected a duration"),
        ("15", "d: expected a duration"),  # text needs its unit
        ("-3s", "d: expected a duration"),
        (-1, "d: a duration cannot be negative"),
        (True, "d: expected a duration"),
        (None, "d: expected a duration"),
    ],
)
def test_parse_duration_refuses(value: object, message: str) -> None:
    with pytest.raises(NumberError) as caught:
        parse_duration(value, field="d")
    assert str(caught.value).startswith(message)


def test_duration_bounds_given_by_the_caller() -> None:
    with pytest.raises(NumberError, match="d: at least 1s"):
        parse_duration("500ms", field="d", minimum=timedelta(seconds=1))
    with pytest.raises(NumberError, match="d: at most 1h"):
        parse_duration("2h", field="d", maximum=timedelta(hours=1))


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1048576", 1 << 20), ("512K", 512 << 10), ("256M", 256 << 20), ("2G", 2 << 30),
     ("1GiB", 1 << 30), ("64Mi", 64 << 20), ("10KB", 10 << 10), (4096, 4096), ("7B", 7)],
)
def test_parse_size(value: object, expected: int) -> None:
    assert parse_size(value, field="s") == expected


@pytest.mark.parametrize("value", ["", "0", "-1", "1T", "½M", "٨M", "1.5G", True, None, 0, "2048G"])
def test_parse_size_refuses(value: object) -> None:
    with pytest.raises(NumberError, match="^s: "):
        parse_size(value, field="s")


@pytest.mark.parametrize(
    ("value", "expected"), [(0.7, 0.7), ("0.25", 0.25), (1, 1.0)]
)
def test_parse_float(value: object, expected: float) -> None:
    assert parse_float(value, field="x", maximum=1.0) == expected


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), 7, "1e3", "٠.٥", 2**80])
def test_parse_float_refuses(value: object) -> None:
    with pytest.raises(NumberError, match="^x: "):
        parse_float(value, field="x", maximum=1.0)


def test_shown_cuts_long_values() -> None:
    assert shown("a" * 10_000) == "'" + "a" * 36 + "..."
    assert shown(3) == "3"


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=30), st.integers(), st.floats(), st.booleans(), st.none()),
       st.integers(-(2**63), 2**63 - 1), st.integers(0, 2**63 - 1))
def test_fuzz_parse_int_is_bounded_or_refused(value: object, low: int, span: int) -> None:
    high = min(low + span, INT64_MAX)
    try:
        number = parse_int(value, field="f", minimum=low, maximum=high)
    except NumberError as exc:
        assert str(exc).startswith("f: ")
    else:
        assert low <= number <= high
        if isinstance(value, str):
            assert value.strip().lstrip("-").isascii()


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    st.text(max_size=20),
    st.from_regex(r"\A-?[0-9]{1,25}(\.[0-9]{1,5})?(ms|s|m|h|d)\Z"),
    st.floats(), st.integers(),
))
def test_fuzz_parse_duration_is_bounded_or_refused(value: object) -> None:
    try:
        duration = parse_duration(value, field="d")
    except NumberError as exc:
        assert str(exc).startswith("d: ")
    else:
        assert timedelta(0) <= duration <= MAX_DURATION
