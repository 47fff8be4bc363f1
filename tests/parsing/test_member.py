"""The one way an error names where a value sits: a plain key dotted, anything else JSON-quoted."""

from __future__ import annotations

import pytest

from agent.parsing.member import member


@pytest.mark.parametrize(
    ("where", "key", "shown"),
    [
        ("labels", "job", "labels.job"),
        ("", "http", "http"),
        ("groups[0]", "name", "groups[0].name"),
        ("groups[0]", "\n", 'groups[0]["\\n"]'),
        ("labels", "a b", 'labels["a b"]'),
        ("labels", "a.b", 'labels["a.b"]'),
        ("labels", "x]", 'labels["x]"]'),
        ("labels", "", 'labels[""]'),
        ("", "\x1b[2J", '["\\u001b[2J"]'),
    ],
)
def test_member(where: str, key: str, shown: str) -> None:
    assert member(where, key) == shown
    assert "\n" not in member(where, key)
