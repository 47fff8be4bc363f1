"""Settings: strict keys and types, durations, environment overrides (table-driven)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.errors import ConfigError
from agent.settings import (
    DiagnosisSettings,
    Settings,
    build,
    load_diagnosis_settings,
    load_settings,
    parse_duration,
)


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
        # a key that is not a plain word is named JSON-quoted: the problem stays one line
        ({"diagnosis": {"groups": [{"\n": None}]}}, r'^diagnosis\.groups\[0\]\["\\n"\]: unknown key'),
        ({"a b": 1}, r'^\["a b"\]: unknown key'),
        ({"prometheus": {"headers": {"\n": 3}}}, r'^prometheus\.headers\["\\n"\]: expected a string'),
    ],
)
def test_build_rejects_naming_the_key(data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build(Settings, data)


def test_egress_settings() -> None:
    default = build(Settings, {})
    assert (default.egress.source.value, default.egress.query, default.egress.window) == (
        "auto", None, timedelta(hours=1))
    assert default.kubernetes.packet_drop_events is True
    custom = build(Settings, {"egress": {"source": "query", "query": "sum(rate(x[$window]))",
                                         "window": "15m"}})  # fmt: skip
    assert (custom.egress.query, custom.egress.window) == ("sum(rate(x[$window]))",
                                                           timedelta(minutes=15))


def test_defaults_and_nested_values() -> None:
    s = build(
        Settings,
        {
            "cluster_name": "prod",
            "prometheus": {"url": "http://127.0.0.1:9090", "timeout": "3s"},
            "leader_election": {"lease_duration": "20s"},
            "kubernetes": {"kubeconfig": None},
        },
    )
    assert s.cluster_name == "prod"
    assert s.prometheus.timeout == timedelta(seconds=3)
    assert s.leader_election.lease_duration == timedelta(seconds=20)
    assert s.leader_election.renew_deadline == timedelta(seconds=10)
    assert s.database.migrate_on_start is True
    assert s.kubernetes.kubeconfig is None
    assert s.diagnosis.protected_namespaces == ["kube-system", "kube-public", "kube-node-lease"]


def test_environment_overrides_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("database: {url: 'sqlite:///a.db'}\nhttp: {port: 8080}\n")
    s = load_settings(
        path,
        {
            "ZONEMEDIC_HTTP__PORT": "9090",
            "ZONEMEDIC_KUBERNETES__NAMESPACES__INCLUDE": "[ml, nlp]",
            "OTHER": "ignored",
        },
    )
    assert s.database.url == "sqlite:///a.db"
    assert s.http.port == 9090
    assert s.kubernetes.namespaces.include == ["ml", "nlp"]


def test_environment_unknown_key_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="^databse: unknown key"):
        load_settings(None, {"ZONEMEDIC_DATABSE__URL": "x"})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: [", "invalid YAML"),
        ("- 1\n- 2\n", "expected a mapping at the top level"),
        ("pod_zone_label: 3\n", "pod_zone_label: expected a string"),
        ("dataplane: calico\n", "dataplane: expected one of auto, cilium, kubernetes"),
        ("cilium_version: latest\n", "diagnosis.cilium_version: expected a release like 1.19"),
        ("cilium_labels: 'k8s:app k8s:!('\n", r"diagnosis.cilium_labels: pattern 'k8s:!\('"),
        ("cilium_labels: 'k8s:!'\n", "diagnosis.cilium_labels: pattern 'k8s:!' has no prefix"),
    ],
)
def test_diagnosis_config_errors_name_the_file_or_key(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_diagnosis_settings(path)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_diagnosis_settings(tmp_path / "nope.yaml")


def test_dataplane_settings_are_read(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("dataplane: kubernetes\ncilium_labels: 'k8s:app'\ncilium_version: v1.18.4\n")
    settings = load_diagnosis_settings(path)
    assert settings.dataplane.value == "kubernetes"
    assert (settings.cilium_labels, settings.cilium_version) == ("k8s:app", "v1.18.4")


def test_empty_diagnosis_config_gives_defaults(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("")
    assert load_diagnosis_settings(path) == DiagnosisSettings()


# -- the slack section -------------------------------------------------------------------------


def test_slack_section_typed(tmp_path: Path) -> None:
    from agent.settings import SlackMode

    path = tmp_path / "c.yaml"
    path.write_text(
        "slack: {enabled: true, mode: socket, channel: C1, usergroup_cache_ttl: 10m,\n"
        "        approvers: {users: [U1], usergroups: [S1]}}\n"
    )
    s = load_settings(path, {}).slack
    assert s.mode is SlackMode.SOCKET and s.channel == "C1"
    assert s.usergroup_cache_ttl == timedelta(minutes=10)
    assert s.approvers.users == ["U1"] and s.approvers.configured


@pytest.mark.parametrize(
    ("data", "message"),
    [
        # ranges, naming the key
        ({"http": {"port": 70000}}, r"^http\.port: must be at most 65535, got 70000$"),
        ({"http": {"port": -1}}, r"^http\.port: must be at least 0, got -1$"),
        ({"log_level": "banana"}, r"^log_level: expected one of debug, info, warning, error, critical, got 'banana'$"),
        ({"prometheus": {"drop_threshold": 7}}, r"^prometheus\.drop_threshold: must be at most 1, got 7$"),
        ({"prometheus": {"retries": -2}}, r"^prometheus\.retries: must be at least 0, got -2$"),
        ({"prometheus": {"timeout": "0s"}}, r"^prometheus\.timeout: must be at least 0\.001s"),
        ({"database": {"pool_size": -1}}, r"^database\.pool_size: must be at least 1, got -1$"),
        ({"database": {"pool_size": 0}}, r"^database\.pool_size: must be at least 1, got 0$"),
        ({"diagnosis": {"price_per_gb": -0.5}}, r"^diagnosis\.price_per_gb: must be at least 0, got -0\.5$"),
        ({"diagnosis": {"bytes_per_step": -1}}, r"^diagnosis\.bytes_per_step: must be at least 0"),
        ({"diagnosis": {"groups": [{"name": "g", "selector": {}, "coordinator": {}, "workers": {},
                                    "ports": [80, 70000]}]}}, r"^diagnosis\.groups\[0\]\.ports\[1\]: must be at most 65535"),
        ({"leader_election": {"lease_duration": "10s", "renew_deadline": "10s"}},
         r"^leader_election\.lease_duration: must be longer than renew_deadline \(10s\), got 10s$"),
        ({"leader_election": {"renew_deadline": "2s", "retry_period": "5s"}},
         r"^leader_election\.renew_deadline: must be longer than retry_period \(5s\), got 2s$"),
        # numbers that overflow or are not finite
        ({"http": {"port": 2**70}}, r"^http\.port: must be at most 9223372036854775807"),
        ({"database": {"retention": "99999999999d"}}, r"^database\.retention: at most 3650d, got '99999999999d'$"),
        ({"database": {"retention": float("inf")}}, r"^database\.retention: expected a duration"),
        ({"database": {"retention": float("nan")}}, r"^database\.retention: expected a duration"),
        ({"prometheus": {"drop_threshold": float("nan")}}, r"^prometheus\.drop_threshold: expected a number"),
        ({"diagnosis": {"price_per_gb": float("inf")}}, r"^diagnosis\.price_per_gb: expected a number"),
        ({"detection": {"debounce": "٥s"}}, r"^detection\.debounce: expected a duration"),
        # the HTTP server's bounds
        ({"http": {"header_timeout": "0s"}}, r"^http\.header_timeout: must be at least 0.01s"),
        ({"http": {"body_timeout": "1h"}}, r"^http\.body_timeout: must be at most 600s"),
        ({"http": {"max_requests": 0}}, r"^http\.max_requests: must be at least 1"),
        ({"http": {"max_requests": 50, "max_connections": 50}},
         r"^http\.max_connections: must be more than max_requests \(50\)"),
        ({"http": {"max_header_bytes": 10}}, r"^http\.max_header_bytes: must be at least 1024"),
        ({"alertmanager": {"basic_auth": {"password_file": "/p"}}},
         r"^alertmanager\.basic_auth\.username: required key is missing"),
    ],
)
def test_values_out_of_range_are_refused_naming_the_key(
    data: dict[str, object], message: str
) -> None:
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


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("slack: {mode: carrier-pigeon}", "slack.mode: expected one of http, socket"),
        ("slack: {approvers: {users: U1}}", "slack.approvers.users: expected a list"),
        ("slack: {bot_token: xoxb-1}", "slack.bot_token: unknown key"),
        ("secrets: {slack_bot_token: xoxb-1}", "secrets: not a config key"),
    ],
)
def test_slack_section_errors_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_settings(path, {})


def test_slack_secrets_from_the_environment_once(tmp_path: Path) -> None:
    env = {"SLACK_BOT_TOKEN": "xoxb-env", "SLACK_SIGNING_SECRET": " s3cret \n"}
    settings = load_settings(None, env)
    env["SLACK_BOT_TOKEN"] = "changed later"
    assert settings.secrets.slack_bot_token == "xoxb-env"
    assert settings.secrets.slack_signing_secret == "s3cret"
    assert settings.secrets.slack_app_token is None
    assert "xoxb-env" not in repr(settings)
    with pytest.raises(ConfigError, match="not a config key"):
        load_settings(None, {"ZONEMEDIC_SECRETS__SLACK_BOT_TOKEN": "x"})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: &a [*a]\n", r"c\.yaml: line 1: alias \*a refers to a node that contains it"),
        ("http: &h {x: *h}\n", r"c\.yaml: line 1: alias \*h refers to a node that contains it"),
        ("x: " + "[" * 990 + "]" * 990 + "\n", r"c\.yaml: line 1: nested deeper than 100 levels"),
        ("".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10) if i else 'x'}]\n" for i in range(8)),
         r"c\.yaml: line \d: aliases expand to more than 100000 nodes"),
        ("http: {port: 99999999999999999999999999}\n", r"^http\.port: must be at most"),
        ("http: {port: ٨٠}\n", r"^http\.port: expected an integer, got '٨٠'"),
        ("database: {retention: .inf}\n", r"^database\.retention: expected a duration"),
        ("database: {retention: .nan}\n", r"^database\.retention: expected a duration"),
    ],
)
def test_hostile_config_files_are_refused_with_one_line(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=message) as caught:
        load_settings(path, {})
    assert "\n" not in str(caught.value)


def test_a_config_file_that_never_ends_is_refused_unread(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^/dev/zero: larger than 1048576 bytes"):
        load_settings(Path("/dev/zero"), {})
    binary = tmp_path / "c.yaml"
    binary.write_bytes(b"a: \xff\xfe\n")
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        load_settings(binary, {})


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"ZONEMEDIC_HTTP__PORT": "70000"}, r"^http\.port: must be at most 65535"),
        ({"ZONEMEDIC_LOG_LEVEL": "banana"}, r"^log_level: expected one of"),
        ({"ZONEMEDIC_HTTP__HOST": "&a [*a]"}, r"^ZONEMEDIC_HTTP__HOST: alias \*a refers to a node"),
        ({"ZONEMEDIC_HTTP__HOST": "[" * 200 + "]" * 200}, r"^ZONEMEDIC_HTTP__HOST: nested deeper"),
    ],
)
def test_hostile_environment_overrides_are_refused(
    environ: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(None, environ)


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
