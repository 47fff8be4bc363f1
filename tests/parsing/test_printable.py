"""The one escaping of outside text for people: every control character is its escape, every
other character stays (a table, and a fuzz test that nothing a terminal obeys gets through)."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.parsing.printable import printable, printable_lines


@pytest.mark.parametrize(("text", "shown"), [
    ("dana", "dana"),
    ("Zoë ✅ 名前", "Zoë ✅ 名前"),
    ("👩‍💻", "👩‍💻"),  # a zero-width joiner inside an emoji stays
    ("mallory\n✅ Approved by dana", "mallory\\n✅ Approved by dana"),
    ("ok\rAPPROVED", "ok\\rAPPROVED"),
    ("\x1b[2J\x1b]0;pwned\x07", "\\x1b[2J\\x1b]0;pwned\\x07"),
    ("\x9b31m", "\\x9b31m"),
    ("a\tb\x00c\x7fd", "a\\tb\\x00c\\x7fd"),
    ("user\u202egnp.exe", "user\\u202egnp.exe"),
    ("line\u2028sep", "line\\u2028sep"),
    ("back\\slash", "back\\slash"),
])
def test_control_characters_are_escaped_and_nothing_else(text: str, shown: str) -> None:
    assert printable(text) == shown


def test_printable_lines_keeps_the_breaks_between_lines() -> None:
    assert printable_lines("a\x1b[1m\nb\rc") == "a\\x1b[1m\nb\\rc"


@settings(max_examples=500, deadline=None)
@given(st.text())
def test_fuzz_nothing_a_terminal_obeys_gets_through(text: str) -> None:
    shown = printable(text)
    for char in shown:
        assert unicodedata.category(char) not in ("Cc", "Zl", "Zp"), repr(char)
        assert char not in "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
    if all(unicodedata.category(c) not in ("Cc", "Zl", "Zp") for c in text):
        assert shown == text or any(c in shown for c in "\\")
