"""Every command on hostile input: exit 2 with one `zonemedic: error:` line naming what is wrong, never a
traceback (fuzzed flags and files), and a bug elsewhere is one `internal error` line, exit 1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.cli import main

REPO = Path(__file__).resolve().parents[2]

_NUMBERISH = st.one_of(
    st.text(alphabet="0123456789٠١٢٣٤٥٦٧٨٩²³¹½-+._eE xinfa∞dhms", min_size=0, max_size=25),
    st.integers(-(2**80), 2**80).map(str),
)


def _one_error_line(err: str) -> bool:
    return err.count("\n") == 1 and err.startswith("zonemedic: error: ")


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flag=st.sampled_from(["--limit", "--since"]), value=_NUMBERISH)
def test_fuzz_incident_flags(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str, value: str
) -> None:
    code = main(["incidents", "list", f"{flag}={value}", "--database", f"sqlite:///{tmp_path}/none.db"])
    _, err = capsys.readouterr()
    assert "Traceback" not in err
    assert code in (1, 2)  # bad flag (2), or a good one and no database there (1)
    if code == 2:
        assert _one_error_line(err)
        assert err.startswith(f"zonemedic: error: {flag}: ") or "database" in err


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=_NUMBERISH)
def test_fuzz_incident_ids(capsys: pytest.CaptureFixture[str], tmp_path: Path, value: str) -> None:
    code = main(["incidents", "show", "--database", f"sqlite:///{tmp_path}/none.db", "--", value])
    _, err = capsys.readouterr()
    assert "Traceback" not in err
    assert code in (1, 2)  # a bad ID (2), or a good one and no database there (1)
    assert err.count("\n") == 1
    if code == 2:
        assert err.startswith("zonemedic: error: ID: ") or "database" in err


_YAMLISH = st.text(alphabet="[]{}&*:,-!|>'\"#\n abp0179.٨²", max_size=120)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_YAMLISH)
def test_fuzz_config_check(capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    code = main(["config", "check", str(path)])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    assert code in (0, 2)
    if code == 2:
        assert all(line.startswith("zonemedic: error: ") for line in err.splitlines())
    else:
        assert out.startswith("ok  ")


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_YAMLISH)
def test_fuzz_diagnose_snapshots(capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(text, encoding="utf-8")
    code = main(["diagnose", "--snapshot", str(path), "--output", "json"])
    _, err = capsys.readouterr()
    assert "Traceback" not in err
    assert code in (0, 2)
    if code == 2:
        assert _one_error_line(err)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["sweep", "--once", "--sync-timeout", "inf"], "--sync-timeout: expected a number"),
        (["sweep", "--once", "--sync-timeout", "nan"], "--sync-timeout: expected a number"),
        (["sweep", "--once", "--sync-timeout", "-1"], "--sync-timeout: must be from 0.001 to 86400"),
        (["sweep", "--once", "--sync-timeout", "1e9"], "--sync-timeout: expected a number"),
        (["sweep", "--once", "--sync-timeout", "99999999"], "--sync-timeout: must be from"),
        (["db", "purge", "--older-than", "99999999999d", "--database", "sqlite:///x.db"], "--older-than: at most 3650d"),
        (["db", "purge", "--older-than", ".nan", "--database", "sqlite:///x.db"], "--older-than: expected a duration"),
        (["diagnose", "--snapshot", "/dev/null", "--max-input-size", "١M"], "--max-input-size: expected a size"),
        (["playbooks", "check", "/nonexistent"], "/nonexistent: not a directory"),
    ],
)
def test_bad_flags_of_every_command_are_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and _one_error_line(err)
    assert message in err


def test_a_bug_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    # `incidents list` against a file that is not a database: the driver's own error is a bug
    # path only if nothing maps it; either way no traceback may reach the user
    bogus = tmp_path / "not.db"
    bogus.write_bytes(b"\x00" * 4096)
    proc = subprocess.run(
        [sys.executable, "-m", "agent.cli", "incidents", "list", "--database", f"sqlite:///{bogus}"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode in (1, 2)
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("zonemedic: ")
