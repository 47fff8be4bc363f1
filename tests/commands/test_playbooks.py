"""`zonemedic playbooks check DIR` through the installed console script: exit 0, or 2 with the line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ZONEMEDIC = [sys.executable, "-m", "agent.cli"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ZONEMEDIC, *args], capture_output=True, text=True, timeout=60, cwd=REPO, check=False
    )


def test_shipped_playbooks_pass() -> None:
    proc = _run("playbooks", "check", "playbooks")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("ok  ") == 5
    assert "zone-split" in proc.stdout


def test_bad_playbook_exits_2_naming_file_line_and_field(tmp_path: Path) -> None:
    (tmp_path / "good.yaml").write_text("name: g\ntriggers: [{type: zone_split}]\nactions: [{type: notify}]\n")
    (tmp_path / "bad.yaml").write_text(
        "name: b\ntriggers:\n  - type: schedule\n    cron: '0 24 * * *'\nactions: [{type: digest}]\n"
    )
    proc = _run("playbooks", "check", str(tmp_path))
    assert proc.returncode == 2
    assert f"{tmp_path / 'bad.yaml'}:4: triggers[0].cron: hour: must be from 0 to 23, got 24" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "ok  g" in proc.stdout


def test_missing_directory_exits_2(tmp_path: Path) -> None:
    proc = _run("playbooks", "check", str(tmp_path / "nope"))
    assert proc.returncode == 2
    assert "not a directory" in proc.stderr


def test_a_playbook_with_a_nul_byte_exits_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "nul.yaml").write_bytes(b"name: n\ntriggers: [{type: zone_split}]\x00\n"
                                         b"actions: [{type: notify}]\n")
    proc = _run("playbooks", "check", str(tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        f"zonemedic: error: {tmp_path / 'nul.yaml'}:2: invalid YAML: control characters are not "
        "allowed (character #x0000)"]
    assert "internal error" not in proc.stderr
