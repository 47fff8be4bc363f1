"""Pytest fixtures giving each test a fresh incident database on SQLite and PostgreSQL.

Imported by tests/store/conftest.py and by the command tests. `db_url` is parametrized over both
backends: SQLite gets a copy of a template file migrated once per session; PostgreSQL uses one
throwaway database per run (tests/support/postgres.py), migrated once and emptied before each test.
`empty_url` gives a database without any schema (SQLite: a new file; PostgreSQL: a second
throwaway database whose `public` schema is recreated before each test). Both PostgreSQL databases
are created on first use, shared by every module of the run (kept in `config.stash`) and dropped at
the end of the session. PostgreSQL cases carry the `postgres` marker.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from agent.settings import DatabaseSettings
from agent.store.engine import make_engine
from agent.store.migrate import upgrade
from agent.store.repository import IncidentStore, open_store
from tests.support.postgres import HOST, PORT, available, create_database, drop_database, url_for

TABLES = ("incident_events", "remediation_actions", "outbox_messages", "decisions", "incidents")
TEST_DB_SETTINGS = DatabaseSettings(
    write_retry=timedelta(seconds=5), connect_timeout=timedelta(seconds=2)
)
_ENGINES: pytest.StashKey[dict[str, Engine]] = pytest.StashKey()


def _admin_engine(config: pytest.Config, role: str) -> Engine:
    """The run's PostgreSQL database for `role` ('migrated' or 'empty'), created on first use."""
    engines = config.stash.setdefault(_ENGINES, {})
    if role not in engines:
        if not available():
            pytest.fail(f"PostgreSQL is not answering on {HOST}:{PORT} (.ci/run starts it; "
                        "or deselect with -m 'not postgres')")
        name = create_database(f"zonemedic_test_{role}")
        engine = make_engine(url_for(name))

        def cleanup(engine: Engine = engine, name: str = name) -> None:
            engine.dispose()
            drop_database(name)

        config.add_cleanup(cleanup)
        if role == "migrated":
            upgrade(engine, DatabaseSettings())
        engines[role] = engine
    return engines[role]


def _url(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine, DatabaseSettings())
    engine.dispose()  # closing the last connection checkpoints the WAL into the file
    return path


@pytest.fixture
def pg_database(request: pytest.FixtureRequest) -> str:
    """The migrated PostgreSQL database of this run, emptied (no tables dropped)."""
    engine = _admin_engine(request.config, "migrated")
    with engine.begin() as conn:
        for table in TABLES:
            conn.execute(text(f"DELETE FROM {table}"))
    return _url(engine)


@pytest.fixture
def pg_empty_database(request: pytest.FixtureRequest) -> str:
    """A PostgreSQL database with nothing in it (its public schema recreated)."""
    engine = _admin_engine(request.config, "empty")
    engine.dispose()  # no pooled connection may hold locks on the old schema
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()
    return _url(engine)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        template: Path = request.getfixturevalue("sqlite_template")
        target = tmp_path / "zonemedic.db"
        shutil.copyfile(template, target)
        return f"sqlite:///{target}"
    url: str = request.getfixturevalue("pg_database")
    return url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'new' / 'zonemedic.db'}"
    url: str = request.getfixturevalue("pg_empty_database")
    return url


@pytest.fixture
def store(db_url: str) -> Iterator[IncidentStore]:
    s = open_store(TEST_DB_SETTINGS, url=db_url)
    yield s
    s.close()
