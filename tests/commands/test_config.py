"""`zonemedic config check FILE`: exit 0 for a good configuration, exit 2 with every problem on its own
line naming the key (or playbook file and line), nothing touched; `run` refuses the same file the
same way before it touches anything (no database file is created)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli import main
from agent.runtime.webhook_credentials import OPEN_WARNING

REPO = Path(__file__).resolve().parents[2]


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
    assert (code, err) == (0, f"zonemedic: warning: alertmanager: {OPEN_WARNING}\n")
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
