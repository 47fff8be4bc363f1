"""Pytest fixtures giving each test a fresh, migrated incident database on SQLite and PostgreSQL.

Imported by tests/store/conftest.py and by the command tests. `db_url` is parametrized over both
backends: SQLite gets a copy of a template file migrated once per session; PostgreSQL gets one
throwaway database per session (tests/support/postgres.py), migrated once and truncated before each
test. PostgreSQL cases carry the `postgres` marker.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from agent.settings import DatabaseSettings
from agent.store.engine import make_engine
from agent.store.migrate import upgrade
from agent.store.repository import IncidentStore, open_store
from tests.support.postgres import throwaway_database

TABLES = "incident_events, remediation_actions, outbox_messages, decisions, incidents"
TEST_DB_SETTINGS = DatabaseSettings(
    write_retry=timedelta(seconds=5), connect_timeout=timedelta(seconds=2)
)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine, DatabaseSettings())
    engine.dispose()  # closing the last connection checkpoints the WAL into the file
    return path


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    with throwaway_database() as url:
        engine = make_engine(url)
        upgrade(engine, DatabaseSettings())
        engine.dispose()
        yield url


def _fresh_postgres(url: str) -> str:
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {TABLES} RESTART IDENTITY CASCADE"))
    engine.dispose()
    return url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        template: Path = request.getfixturevalue("sqlite_template")
        target = tmp_path / "zonemedic.db"
        shutil.copyfile(template, target)
        return f"sqlite:///{target}"
    return _fresh_postgres(request.getfixturevalue("pg_database"))


@pytest.fixture
def store(db_url: str) -> Iterator[IncidentStore]:
    s = open_store(TEST_DB_SETTINGS, url=db_url)
    yield s
    s.close()
