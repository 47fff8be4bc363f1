"""The builder: durations, wrong types and unknown keys named, every problem listed in order, and
fuzzed values that build valid settings or name each problem (table-driven)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.errors import ConfigError
from agent.settings import Settings, build, parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500ms", timedelta(milliseconds=500)),
        ("15s", timedelta(seconds=15)),
        ("30m", timedelta(minutes=30)),
        ("2h", timedelta(hours=2)),
        ("7d", timedelta(days=7)),
        (3, timedelta(seconds=3)),
        ("1.5s", timedelta(seconds=1.5)),
    ],
)
def test_parse_duration(text: object, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("bad", ["15", "fast", "-3s", True, None, [1], -1])
def test_parse_duration_rejects(bad: object) -> None:
    with pytest.raises(ConfigError, match="duration"):
        parse_duration(bad, key="x.duration")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"databse": {}}, r"^databse: unknown key"),
        ({"database": {"url": 3}}, r"^database\.url: expected a string, got 3"),
        ({"http": {"port": "80"}}, r"^http\.port: expected an integer"),
        ({"http": {"port": True}}, r"^http\.port: expected an integer"),
        ({"leader_election": {"lease_duration": "soon"}}, r"^leader_election\.lease_duration:"),
        ({"kubernetes": {"namespaces": {"include": "ml"}}}, r"include: expected a list"),
        ({"diagnosis": {"groups": [{"name": "g"}]}}, r"^diagnosis\.groups\[0\]\.selector: required"),
        ({"diagnosis": {"groups": [{"name": "g", "selector": {"a": 1}, "coordinator": {},
                                    "workers": {}}]}}, r"selector\.a: expected a string"),
        ({"prometheus": []}, r"^prometheus: expected a mapping"),
        ({"egress": {"source": "hubble"}}, r"^egress\.source: expected one of auto, beyla, obi, "
                                           r"query, none, got 'hubble'"),
        ({"egress": {"source": "query"}}, r"^egress\.query: required when egress\.source is query"),
        ({"egress": {"source": "query", "query": "  "}}, r"^egress\.query: required"),
        ({"egress": {"query": "rate(x[$window])"}},
         r"^egress\.query: only read when egress\.source is query \(it is auto\)"),
        ({"egress": {"window": "5s"}}, r"^egress\.window: must be at least 10s, got '5s'"),
        ({"kubernetes": {"packet_drop_events": "yes"}},
         r"^kubernetes\.packet_drop_events: expected true or false"),
        ({"admission": {"group_memory": "10s"}}, r"^admission\.group_memory: must be at least 60s"),
        ({"admission": {"group_memory": "30d"}}, r"^admission\.group_memory: must be at most"),
        ({"admission": {"group_memory": "soon"}}, r"^admission\.group_memory:.*duration"),
        # a key that is not a plain word is named JSON-quoted: the problem stays one line
        ({"diagnosis": {"groups": [{"\n": None}]}}, r'^diagnosis\.groups\[0\]\["\\n"\]: unknown key'),
        ({"a b": 1}, r'^\["a b"\]: unknown key'),
        ({"prometheus": {"headers": {"\n": 3}}}, r'^prometheus\.headers\["\\n"\]: expected a string'),
    ],
)
def test_build_rejects_naming_the_key(data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build(Settings, data)


def test_every_problem_is_listed_by_key_in_file_order() -> None:
    data = {
        "log_level": "banana",
        "http": {"port": 70000, "host": 3},
        "database": {"pool_size": -1, "retention": "forever"},
        "databse": {},
        "diagnosis": {"groups": [{"name": "g"}]},
    }
    with pytest.raises(ConfigError) as caught:
        build(Settings, data)
    assert tuple(p.split(" (known keys")[0] for p in caught.value.problems) == (
        "log_level: expected one of debug, info, warning, error, critical, got 'banana'",
        "http.port: must be at most 65535, got 70000",
        "http.host: expected a string, got 3",
        "database.pool_size: must be at least 1, got -1",
        "database.retention: expected a duration like 500ms, 15s, 30m, 2h or 7d, got 'forever'",
        "databse: unknown key",
        "diagnosis.groups[0].selector: required key is missing",
        "diagnosis.groups[0].coordinator: required key is missing",
        "diagnosis.groups[0].workers: required key is missing",
    )
    assert "\n" not in str(caught.value)


_ANY_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)
_SECTION_KEYS = {
    "http": ["host", "port", "api_token_file", "database_timeout", "header_timeout",
             "body_timeout", "max_requests", "max_connections", "max_header_bytes"],
    "alertmanager": ["bearer_token_file", "basic_auth"],
    "database": ["url", "retention", "pool_size", "busy_timeout", "connect_timeout"],
    "prometheus": ["url", "timeout", "retries", "drop_threshold", "headers"],
    "leader_election": ["lease_duration", "renew_deadline", "retry_period", "enabled"],
    "diagnosis": ["groups", "price_per_gb", "bytes_per_step", "protected_namespaces"],
    "detection": ["debounce", "max_delay", "metrics_interval"],
}


@settings(max_examples=300, deadline=None)
@given(
    st.fixed_dictionaries({}, optional={
        section: st.dictionaries(st.sampled_from(keys), _ANY_VALUE | st.sampled_from(
            ["15s", "0s", "99999999999d", "٥s", 70000, -1, 0.5, 7]), max_size=3)
        for section, keys in _SECTION_KEYS.items()
    }),
    st.sampled_from([None, "info", "banana", 3]),
)
def test_fuzz_any_values_build_valid_settings_or_name_every_problem(
    sections: dict[str, dict[str, object]], log_level: object
) -> None:
    data: dict[str, object] = dict(sections)
    if log_level is not None:
        data["log_level"] = log_level
    try:
        built = build(Settings, data)
    except ConfigError as exc:
        assert exc.problems and all(": " in p and "\n" not in p for p in exc.problems)
        return
    assert 0 <= built.http.port <= 65535
    assert built.leader_election.lease_duration > built.leader_election.renew_deadline
    assert 0.0 <= built.prometheus.drop_threshold <= 1.0
    assert built.database.pool_size >= 1
    assert built.log_level in ("debug", "info", "warning", "error", "critical")


def test_admission_group_memory_is_read() -> None:
    built = build(Settings, {"admission": {"group_memory": "20m"}})
    assert built.admission.group_memory == timedelta(minutes=20)
    assert build(Settings, {}).admission.group_memory == timedelta(hours=1)
