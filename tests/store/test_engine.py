"""Engine setup: URL selection and normalisation, SQLite pragmas, and a commit whose answer is lost
(the retried decision recognises its own win: one decision, no duplicate, no loss)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from agent.errors import InputError
from agent.model.incident import Actor
from agent.model.lifecycle import DecisionOutcome, DecisionSource, IncidentStatus
from agent.settings import DatabaseSettings, Settings
from agent.store.engine import database_url, make_engine, normalise_url
from agent.store.repository import IncidentStore
from tests.store.helpers import T0, finding


@pytest.mark.parametrize(
    ("settings", "override", "expected"),
    [
        (Settings(), None, "sqlite:////var/lib/zonemedic/zonemedic.db"),
        (Settings(data_dir="/srv/zm"), None, "sqlite:////srv/zm/zonemedic.db"),
        (Settings(database=DatabaseSettings(url="postgresql://db/zm")), None, "postgresql://db/zm"),
        (Settings(database=DatabaseSettings(url="postgresql://db/zm")), "sqlite:///x.db",
         "sqlite:///x.db"),
    ],
)
def test_database_url(settings: Settings, override: str | None, expected: str) -> None:
    assert database_url(settings, override) == expected


@pytest.mark.parametrize(
    ("url", "driver"),
    [
        ("postgresql://u@h/db", "postgresql+psycopg"),
        ("postgres://u@h/db", "postgresql+psycopg"),
        ("postgresql+psycopg://u@h/db", "postgresql+psycopg"),
        ("sqlite:///x.db", "sqlite"),
        ("sqlite+pysqlite:///x.db", "sqlite"),
    ],
)
def test_normalise_url(url: str, driver: str) -> None:
    assert normalise_url(url).drivername == driver


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://u@h/db", "unsupported backend 'mysql'"),
        ("sqlite+aiosqlite:///x.db", "only the built-in sqlite driver"),
        ("::", "cannot be parsed"),
    ],
)
def test_bad_urls(url: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        normalise_url(url)


def test_sqlite_pragmas(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'deep' / 'dir' / 'z.db'}")
    try:
        with engine.connect() as conn:
            assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert conn.execute(text("PRAGMA foreign_keys")).scalar() == 1
            assert conn.execute(text("PRAGMA busy_timeout")).scalar() == 30000
        assert (tmp_path / "deep" / "dir").is_dir()
    finally:
        engine.dispose()


def test_lost_commit_answer_is_retried_without_duplicate(
    store: IncidentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    incident_id = store.record_finding(finding()).incident.id
    store.transition(incident_id, IncidentStatus.OPEN, IncidentStatus.AWAITING_APPROVAL,
                     actor="agent", now=T0)
    dialect = store.engine.dialect
    original = dialect.do_commit
    failures = []

    def commit_then_lose_answer(dbapi_connection: Any) -> None:
        original(dbapi_connection)
        if not failures:
            failures.append(1)
            error = dialect.loaded_dbapi.OperationalError
            raise error("disk I/O error" if dialect.name == "sqlite" else "connection lost")

    monkeypatch.setattr(dialect, "do_commit", commit_then_lose_answer)
    result = store.record_decision(incident_id, DecisionOutcome.APPROVE,
                                   actor=Actor("U1", "alice", DecisionSource.SLACK), now=T0)
    monkeypatch.undo()
    assert failures == [1]
    assert result.applied and result.status is IncidentStatus.APPROVED
    detail = store.get_incident(incident_id)
    assert [d.actor_id for d in detail.decisions] == ["U1"]
    assert detail.incident.status is IncidentStatus.APPROVED
