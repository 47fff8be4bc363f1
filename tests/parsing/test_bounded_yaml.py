"""Bounded YAML: recursive anchors, deep nesting and alias bombs refused with one line naming the
line; ordinary documents load unchanged with both loaders; fuzzed: any text either loads within
the limits or raises YamlLimitError / yaml.YAMLError, never RecursionError or another crash."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.parsing.bounded_yaml import (
    YamlLimitError,
    YamlLimits,
    bounded_events,
    check_yaml,
    safe_load,
    safe_load_all,
)


def _bomb(levels: int, fan: int = 10) -> str:
    lines = ["a0: &a0 [" + ", ".join(["x"] * fan) + "]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * fan) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("&a [*a]", r"^line 1: alias \*a refers to a node that contains it \(a recursive structure\)$"),
        ("- &a [1, [2, *a]]", r"^line 1: alias \*a refers to a node that contains it"),
        ("a: &a\n  b: *a\n", r"^line 2: alias \*a refers to a node that contains it"),
        ("a: &a\n  <<: *a\n", r"^line 2: alias \*a refers to a node that contains it"),
        ("[" * 101 + "]" * 101, r"^line 1: nested deeper than 100 levels$"),
        ("".join("  " * i + "-\n" for i in range(102)), r"^line \d+: nested deeper than 100 levels$"),
        ("".join("  " * i + "k:\n" for i in range(102)), r"^line 101: nested deeper than 100 levels$"),
        (_bomb(6), r"^line 5: aliases expand to more than 100000 nodes$"),
        ("- " + _bomb(9).replace("\n", "\n  "), r"aliases expand to more than 100000 nodes"),  # under a list
        # an alias whose expansion, where it is used, goes past the depth limit
        ("deep: &d " + "[" * 60 + "]" * 60 + "\nuse: " + "[" * 50 + "*d" + "]" * 50,
         r"^line 2: alias \*d nests deeper than 100 levels$"),
    ],
)
def test_refused_with_one_line(text: str, message: str) -> None:
    with pytest.raises(YamlLimitError, match=message) as caught:
        safe_load(text)
    assert "\n" not in str(caught.value)


def test_limits_are_configurable() -> None:
    with pytest.raises(YamlLimitError, match="nested deeper than 3 levels"):
        check_yaml("a: {b: {c: {d: 1}}}", YamlLimits(max_depth=3))
    check_yaml("a: {b: {c: 1}}", YamlLimits(max_depth=3))
    with pytest.raises(YamlLimitError, match="more than 5 nodes"):
        check_yaml("a: &a [1, 2, 3]\nb: [*a, *a]", YamlLimits(max_alias_nodes=5))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: &a [1, 2]\nb: *a\n", {"a": [1, 2], "b": [1, 2]}),
        ("base: &b {x: 1}\nuse:\n  <<: *b\n  y: 2\n", {"base": {"x": 1}, "use": {"x": 1, "y": 2}}),
        ("a: [&x 1, *x, *x]\n", {"a": [1, 1, 1]}),
    ],
)
def test_ordinary_documents_load_unchanged(text: str, expected: Any) -> None:
    assert safe_load(text) == expected
    assert safe_load(text) == yaml.safe_load(text)


def test_exactly_the_depth_limit_loads() -> None:
    value = safe_load("[" * 100 + "]" * 100)
    depth = 0
    while isinstance(value, list) and value:
        value = value[0]
        depth += 1
    assert depth == 99  # 100 lists, the innermost empty


def test_anchors_do_not_cross_documents() -> None:
    docs = list(safe_load_all("a: &a [1]\n---\nb: [2]\n"))
    assert docs == [{"a": [1]}, {"b": [2]}]
    with pytest.raises(yaml.YAMLError, match="undefined alias"):
        list(safe_load_all("a: &a [1]\n---\nb: *a\n"))


def test_bounded_events_passes_events_through_and_stops_at_the_limit() -> None:
    events = list(bounded_events(yaml.parse("a: [1, 2]")))
    assert [type(e).__name__ for e in events][:3] == ["StreamStartEvent", "DocumentStartEvent", "MappingStartEvent"]
    seen = []
    with pytest.raises(YamlLimitError):
        for event in bounded_events(yaml.parse("&a [*a]")):
            seen.append(event)
    assert not any(isinstance(e, yaml.AliasEvent) for e in seen)


_YAMLISH = st.text(alphabet="[]{}&*:,-!|>'\"# \n\tab01", max_size=200)


@settings(max_examples=400, deadline=None)
@given(_YAMLISH)
def test_fuzz_any_text_loads_or_is_refused_cleanly(text: str) -> None:
    try:
        safe_load_all_list = list(safe_load_all(text))
    except (YamlLimitError, yaml.YAMLError):
        return
    assert isinstance(safe_load_all_list, list)


_DATA = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=30,
)


@settings(max_examples=200, deadline=None)
@given(_DATA, st.integers(1, 130))
def test_fuzz_nested_data_round_trips_or_is_refused_for_depth(data: Any, wrap: int) -> None:
    for _ in range(wrap):
        data = [data]
    # no line folding: PyYAML's emitter folds a deeply indented double-quoted scalar with an
    # escaped control character followed by a space ("0\x1f 0") into text its own loader reads
    # back differently, which is no question of depth
    text = yaml.safe_dump(data, width=float("inf"))
    try:
        loaded = safe_load(text)
    except YamlLimitError as exc:
        assert "nested deeper than 100 levels" in str(exc)
        assert wrap >= 90  # only deep wrapping is refused
        return
    assert loaded == data


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 12), st.integers(2, 12))
def test_fuzz_alias_bombs_are_refused_exactly_past_the_limit(levels: int, fan: int) -> None:
    size = fan + 1  # nodes in a0: the list and its scalars
    expanded = 0  # nodes the aliases add in all
    for _ in range(1, levels):
        expanded += fan * size
        size = 1 + fan * size
    if expanded > 100_000:
        with pytest.raises(YamlLimitError, match="aliases expand to more than 100000 nodes"):
            safe_load(_bomb(levels, fan))
    else:
        assert len(safe_load(_bomb(levels, fan))) == levels
