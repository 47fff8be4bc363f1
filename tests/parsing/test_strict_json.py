"""The one reader of JSON bodies: strict UTF-8 JSON, no key twice, one-line errors (a table)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.parsing.strict_json import JsonError, parse_json


@pytest.mark.parametrize(("raw", "expected"), [
    (b'{"a": 1, "b": [1, "x", null]}', {"a": 1, "b": [1, "x", None]}),
    ('{"name": "Zoë ✅"}'.encode(), {"name": "Zoë ✅"}),
    (b'"\\ud83d\\ude00"', "\U0001f600"),  # a surrogate pair is one character
    (b'[{"a": 1}, {"a": 2}]', [{"a": 1}, {"a": 2}]),  # the same key in two objects is fine
])
def test_strict_json_is_read(raw: bytes, expected: object) -> None:
    assert parse_json(raw) == expected


@pytest.mark.parametrize(("raw", "error"), [
    (b'{"a": 1, "a": 2}', 'body: duplicate key "a" in an object'),
    (b'{"x": {"k": 1, "k": 1}}', 'body: duplicate key "k" in an object'),
    (b'{"\\u001b[2J": 1, "\\u001b[2J": 2}', 'body: duplicate key "\\u001b[2J" in an object'),
    (b"\xff\xfe{}", "body: not UTF-8 (byte 0xff at offset 0)"),
    ('{"a": "é"}'.encode("latin-1"), "body: not UTF-8 (byte 0xe9 at offset 7)"),
    (b'"\\ud800"', "body: not JSON: no low surrogate in string: line 1 column 2 (char 1)"),
    (b"NaN", "body: not JSON: unexpected character"),
    (b'{"a": Infinity}', "body: not JSON: unexpected character"),
    (b"\xef\xbb\xbf{}", "body: not JSON: UTF-8 byte order mark (BOM) is not supported"),
    (b"[" * 1010 + b"]" * 1010, "body: not JSON: nested too deeply"),
    (b"[" * 3000 + b"]" * 3000, "body: not JSON: depth limit exceeded"),
    (b"", "body: not JSON"),
])
def test_anything_else_is_one_line_naming_the_problem(raw: bytes, error: str) -> None:
    with pytest.raises(JsonError) as caught:
        parse_json(raw)
    assert str(caught.value).startswith(error)
    assert "\n" not in str(caught.value)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64) | st.text(alphabet='{}[]":,a1\\u \x00\xff', max_size=64).map(str.encode))
def test_fuzz_any_bytes_are_json_or_one_json_error(raw: bytes) -> None:
    try:
        parse_json(raw)
    except JsonError as exc:
        assert str(exc).startswith("body: ") and "\n" not in str(exc)
