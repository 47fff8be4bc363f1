"""`zonemedic config check FILE`: exit 0 for a good configuration, exit 2 with every problem on its own
line naming the key (or playbook file and line), nothing touched; `run` refuses the same file the
same way before it touches anything (no database file is created)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli import main
from agent.commands.config import validated_settings
from agent.playbook.schema import parse_playbook
from agent.runtime.webhook_credentials import OPEN_WARNING

REPO = Path(__file__).resolve().parents[2]
OPEN = f"zonemedic: warning: alertmanager: {OPEN_WARNING}\n"  # no webhook credentials


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _config(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "zonemedic.yaml"
    path.write_text(
        f"playbooks_dir: {REPO / 'playbooks'}\ndatabase: {{url: 'sqlite:///{tmp_path}/zm.db'}}\n"
        + body,
        encoding="utf-8",
    )
    return path


def test_a_good_configuration_is_ok(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ZONEMEDIC_HTTP__PORT", raising=False)
    path = _config(tmp_path, "cluster_name: prod\nhttp: {port: 9090}\n")
    code, out, err = cli(capsys, "config", "check", str(path))
    assert (code, err) == (0, OPEN)
    assert out.startswith(f"ok  {path}: cluster prod, ")
    assert not (tmp_path / "zm.db").exists()  # nothing touched


@pytest.mark.parametrize("credentials", [
    "alertmanager: {bearer_token_file: /etc/zonemedic/alertmanager/token}\n",
    "alertmanager: {basic_auth: {username: am, password_file: /etc/zonemedic/am/password}}\n",
])
def test_a_webhook_with_credentials_is_not_warned_about(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, credentials: str
) -> None:
    code, out, err = cli(capsys, "config", "check", str(_config(tmp_path, credentials)))
    assert (code, err) == (0, "") and out.startswith("ok  ")


@pytest.mark.parametrize(("body", "problem"), [
    ("alertmanager: {basic_auth: {username: am}}\n",
     "alertmanager.basic_auth.password_file: required key is missing"),
    ("alertmanager: {basic_auth: {username: 'a:b', password_file: /p}}\n",
     "alertmanager.basic_auth.username: expected a name without ':'"),
    ("alertmanager: {token: x}\n", "alertmanager.token: unknown key"),
])
def test_bad_webhook_credentials_are_named(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                           body: str, problem: str) -> None:
    code, _, err = cli(capsys, "config", "check", str(_config(tmp_path, body)))
    assert code == 2 and problem in err


def test_every_problem_is_listed_by_key(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = _config(
        tmp_path,
        "log_level: banana\n"
        "http: {port: 70000}\n"
        "kubernetes: {namespaces: {include: ml}}\n"
        "prometheus: {drop_threshold: 7, retries: -1}\n"
        "leader_election: {lease_duration: 5s, renew_deadline: 10s}\n"
        "diagnosis: {price_per_gb: -1}\n",
    )
    code, out, err = cli(capsys, "config", "check", str(path))
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert [line.split(":")[2].strip() for line in lines] == [
        "log_level", "http.port", "kubernetes.namespaces.include", "prometheus.drop_threshold",
        "prometheus.retries", "leader_election.lease_duration", "diagnosis.price_per_gb",
    ]
    assert all(line.startswith("zonemedic: error: ") for line in lines)
    assert "Traceback" not in err


def test_environment_overrides_are_checked_too(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZONEMEDIC_HTTP__PORT", "٨٠")
    code, _, err = cli(capsys, "config", "check", str(_config(tmp_path, "")))
    assert code == 2
    assert err == "zonemedic: error: http.port: expected an integer, got '٨٠'\n"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("a: &a [*a]\n", "line 3: alias *a refers to a node that contains it"),
        ("x: " + "[" * 900 + "]" * 900 + "\n", "line 3: nested deeper than 100 levels"),
        ("http: {port: 1" + "0" * 40 + "}\n", "http.port: must be at most 9223372036854775807"),
        ("database: {retention: 99999999999d}\n", "database.retention: at most 3650d"),
    ],
)
def test_hostile_files_are_one_clear_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, body: str, message: str
) -> None:
    code, _, err = cli(capsys, "config", "check", str(_config(tmp_path, body)))
    assert code == 2
    assert err.count("\n") == 1 and message in err


def test_bad_playbooks_are_listed_with_the_settings(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    books = tmp_path / "books"
    books.mkdir()
    (books / "a.yaml").write_text("name: a\ntriggers: [{type: zone_splitt}]\nactions: [{type: notify}]\n")
    (books / "b.yaml").write_text("name: b\ntriggers: [{type: schedule, cron: '0 0 31 2 *'}]\nactions: [{type: digest}]\n")
    path = tmp_path / "c.yaml"
    path.write_text(f"playbooks_dir: {books}\n")
    code, _, err = cli(capsys, "config", "check", str(path))
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 2
    assert f"{books / 'a.yaml'}:2: triggers[0].type" in lines[0]
    assert f"{books / 'b.yaml'}:2: triggers[0].cron" in lines[1] and "never fires" in lines[1]


def test_missing_playbook_directory_names_the_key(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"playbooks_dir: {tmp_path / 'nope'}\n")
    code, _, err = cli(capsys, "config", "check", str(path))
    assert code == 2
    assert err == f"zonemedic: error: playbooks_dir: {tmp_path / 'nope'}: not a directory\n"


def test_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = cli(capsys, "config", "check", str(tmp_path / "nope.yaml"))
    assert code == 2 and "cannot read config file" in err


def test_run_refuses_the_same_file_before_touching_anything(tmp_path: Path) -> None:
    path = _config(tmp_path, "http: {port: 70000}\nlog_level: banana\n")
    proc = subprocess.run(
        [sys.executable, "-m", "agent.cli", "run", "--config", str(path)],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "zonemedic: error: http.port: must be at most 65535, got 70000",
        "zonemedic: error: log_level: expected one of debug, info, warning, error, critical, "
        "got 'banana'",
    ]
    assert not (tmp_path / "zm.db").exists()


# --------------------------------------------------------------------------------------------
# the shipped configuration, checked against the pod's layout


def test_the_shipped_config_passes_its_own_check(capsys: pytest.CaptureFixture[str]) -> None:
    shipped = REPO / "deploy" / "base" / "config.yaml"
    code, out, err = cli(capsys, "config", "check", str(shipped))
    assert (code, err) == (0, OPEN)  # shipped without webhook credentials: said so
    lines = out.splitlines()
    books = sorted(p.name for p in (REPO / "playbooks").glob("*.yaml"))
    assert f"{len(books)} playbook(s) from /etc/zonemedic/playbooks (in the pod: ConfigMap " \
        "zonemedic-playbooks" in lines[0]
    notes = [line for line in lines[1:] if line.startswith("note: ")]
    assert len(notes) == len(lines) - 1
    by_key = {line.split()[1]: line for line in notes}
    assert "exists only in the pod (Secret zonemedic-slack mounted at /etc/zonemedic/slack, " \
        "optional)" in by_key["slack.bot_token_file"]
    assert "emptyDir volume data mounted at /var/lib/zonemedic" in by_key["data_dir"]
    assert "playbooks_dir" not in by_key  # checked, not merely noted


def _shipped_copy(tmp_path: Path) -> Path:
    """deploy/base and playbooks/ copied with their relative layout kept; the config's path."""
    for sub in ("deploy/base", "playbooks"):
        shutil.copytree(REPO / sub, tmp_path / sub)
    return tmp_path / "deploy" / "base" / "config.yaml"


def test_a_bad_playbook_of_the_pods_configmap_fails_naming_the_repository_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = _shipped_copy(tmp_path)
    bad = tmp_path / "playbooks" / "zone-split.yaml"
    bad.write_text(bad.read_text().replace("type: zone_split\n", "type: zone_splitt\n"))
    stray = tmp_path / "playbooks" / "not-in-the-configmap.yaml"
    stray.write_text("not: a playbook\n")  # not listed by the generator: the pod never sees it
    code, _, err = cli(capsys, "config", "check", str(config))
    assert code == 2
    assert err.splitlines() == [
        f"zonemedic: error: {bad}:6: triggers[0].type: 'zone_splitt' is not one of zone_split, "
        "policy_blocked, zone_label_mismatch, gpu_utilization_drop, alert, schedule"
    ]


def test_a_file_the_pods_configmap_lacks_is_an_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = _shipped_copy(tmp_path)
    config.write_text(config.read_text().replace(
        "  api_token_file: null", "  api_token_file: /etc/zonemedic/config/api-token"))
    code, _, err = cli(capsys, "config", "check", str(config))
    assert code == 2
    assert err == (
        "zonemedic: error: http.api_token_file: /etc/zonemedic/config/api-token: not in the pod: "
        "ConfigMap zonemedic-config mounted at /etc/zonemedic/config has no key 'api-token' "
        "(its keys: config.yaml)\n"
    )


def test_outside_a_kustomization_pod_paths_are_checked_here(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    shutil.copy(REPO / "deploy" / "base" / "config.yaml", config)
    code, _, err = cli(capsys, "config", "check", str(config))
    assert code == 2
    assert err == "zonemedic: error: playbooks_dir: /etc/zonemedic/playbooks: not a directory\n"


def test_no_playbooks_dir_means_the_shipped_playbooks_wherever_run_starts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # not the repository: no relative default may be looked up here
    for key in [k for k in os.environ if k.startswith("ZONEMEDIC_")]:
        monkeypatch.delenv(key)
    settings, playbooks = validated_settings(None, {})
    assert settings.playbooks_dir is None
    assert sorted(p.name for p in playbooks) == sorted(
        parse_playbook((REPO / "playbooks" / f).read_text(), path=REPO / "playbooks" / f).name
        for f in os.listdir(REPO / "playbooks") if f.endswith(".yaml"))
    (tmp_path / "empty.yaml").write_text("cluster_name: here\n")
    code, out, err = cli(capsys, "config", "check", "empty.yaml")
    assert (code, err) == (0, OPEN)
    assert out == f"ok  empty.yaml: cluster here, {len(playbooks)} playbook(s) from " \
        f"{REPO / 'playbooks'}\n"
