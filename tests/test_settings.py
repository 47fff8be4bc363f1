"""Settings: strict keys and types, durations, environment overrides (table-driven)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

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
    ],
)
def test_build_rejects_naming_the_key(data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build(Settings, data)


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
