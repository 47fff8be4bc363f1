"""`zonemedic db upgrade|current|purge` and database selection: --database, --config, the default
SQLite file under data_dir (created when missing, clear error when it cannot be), an unreachable
database, and the installed console script finding the migrations from any directory."""

from __future__ import annotations

import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent.cli import main
from agent.model.incident import Actor
from agent.model.lifecycle import DecisionOutcome, DecisionSource, IncidentStatus
from agent.settings import DatabaseSettings
from agent.store.engine import make_engine
from agent.store.migrate import current_revision, schema_diff
from agent.store.repository import IncidentStore
from tests.store.helpers import HEAD, finding

NOW = datetime.now(UTC)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_upgrade_then_current(capsys: pytest.CaptureFixture[str], empty_url: str) -> None:
    code, out, _ = cli(capsys, "db", "current", "--database", empty_url)
    assert code == 0 and out == f"revision none (head {HEAD}): needs `zonemedic db upgrade`\n"
    code, out, _ = cli(capsys, "db", "upgrade", "--database", empty_url)
    assert code == 0 and out.rstrip().endswith(f"is at revision {HEAD}")
    engine = make_engine(empty_url, DatabaseSettings())
    try:
        assert current_revision(engine) == HEAD and schema_diff(engine) == []
    finally:
        engine.dispose()
    code, out, _ = cli(capsys, "db", "current", "--database", empty_url)
    assert out == f"revision {HEAD} (head {HEAD}): up to date\n"


def test_purge(capsys: pytest.CaptureFixture[str], db_url: str, store: IncidentStore) -> None:
    old = store.record_finding(finding("old", at=NOW - timedelta(days=300))).incident.id
    store.transition(old, IncidentStatus.OPEN, IncidentStatus.AWAITING_APPROVAL, actor="a",
                     now=NOW - timedelta(days=300))
    store.record_decision(old, DecisionOutcome.REJECT, actor=Actor("U9", "dan", DecisionSource.CLI),
                          now=NOW - timedelta(days=299))
    recent = store.record_finding(finding("recent", at=NOW - timedelta(days=3))).incident.id
    store.transition(recent, IncidentStatus.OPEN, IncidentStatus.RESOLVED, actor="a",
                     now=NOW - timedelta(days=2))
    code, out, _ = cli(capsys, "db", "purge", "--database", db_url)  # default retention 180d
    assert code == 0 and out.startswith("purged 1 incident(s)") and "decisions kept" in out
    assert [i.id for i in store.list_incidents().incidents] == [recent]
    code, out, _ = cli(capsys, "db", "purge", "--database", db_url, "--older-than", "1d")
    assert out.startswith("purged 1 incident(s)")
    assert store.list_incidents().incidents == []
    code, out, err = cli(capsys, "db", "purge", "--database", db_url, "--older-than", "soon")
    assert code == 2 and "--older-than: expected a duration" in err


def test_default_database_under_data_dir(capsys: pytest.CaptureFixture[str],
                                         tmp_path: Path) -> None:
    config = tmp_path / "zonemedic.yaml"
    data_dir = tmp_path / "data" / "nested"
    config.write_text(f"data_dir: {data_dir}\n")
    code, _, err = cli(capsys, "incidents", "list", "--config", str(config))
    assert code == 1 and f"{data_dir}/zonemedic.db does not exist" in err
    code, _, _ = cli(capsys, "db", "upgrade", "--config", str(config))
    assert code == 0 and (data_dir / "zonemedic.db").is_file()
    code, out, _ = cli(capsys, "incidents", "list", "--config", str(config))
    assert (code, out) == (0, "no incidents\n")


def test_data_dir_that_cannot_be_created(capsys: pytest.CaptureFixture[str],
                                         tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    config = tmp_path / "zonemedic.yaml"
    config.write_text(f"data_dir: {blocker / 'sub'}\n")
    code, out, err = cli(capsys, "db", "upgrade", "--config", str(config))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"database directory {blocker / 'sub'} cannot be created" in err


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://x@localhost/db", "unsupported backend 'mysql'"),
        ("not a url", "cannot be parsed"),
    ],
)
def test_bad_database_url(capsys: pytest.CaptureFixture[str], url: str, message: str) -> None:
    code, _, err = cli(capsys, "db", "upgrade", "--database", url)
    assert code == 2 and message in err and err.count("\n") == 1


def test_unreachable_database_is_a_clear_error(capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "zonemedic.yaml"
    config.write_text(
        f"database:\n  url: postgresql://postgres@127.0.0.1:{port}/zonemedic\n"
        "  start_timeout: 1s\n  connect_timeout: 1s\n"
    )
    code, out, err = cli(capsys, "incidents", "list", "--config", str(config))
    *retries, error = err.splitlines()
    assert code == 1 and out == ""
    # the retries while it waits are readable warnings, then one error line
    assert retries and all(
        line.startswith("zonemedic: warning: database ") and "retrying" in line for line in retries
    )
    assert error.startswith("zonemedic: database ") and "Traceback" not in err
    assert f"database postgresql+psycopg://postgres@127.0.0.1:{port}/zonemedic unavailable" in err
    assert "connect failed after" in err


def test_console_script_finds_migrations_from_anywhere(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "zonemedic"
    target = tmp_path / "elsewhere" / "z.db"
    result = subprocess.run(
        [str(script), "db", "upgrade", "--database", f"sqlite:///{target}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert f"is at revision {HEAD}" in result.stdout and target.is_file()


def test_building_the_parser_does_not_import_sqlalchemy() -> None:
    code = (
        "import sys, agent.cli; agent.cli.build_parser(); "
        "print(sorted(m for m in ('sqlalchemy', 'alembic', 'psycopg') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=True)
    assert result.stdout.strip() == "[]"
