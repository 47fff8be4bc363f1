"""The loader: the file and `ZONEMEDIC_` overrides, `zonemedic diagnose --config` files, and hostile
files and overrides refused with one line naming the file or the key (table-driven)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.errors import ConfigError
from agent.settings import DiagnosisSettings, load_diagnosis_settings, load_settings


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
