"""The run's test databases behind the database fixtures of tests/conftest.py.

Who calls it: tests/conftest.py (`sqlite_template`, `pg_database`, `pg_empty_database`, `db_url`,
`empty_url`, `store`) and the tests that open a second store on a fixture's database with the
same budgets (`TEST_DB_SETTINGS`). `admin_engine` creates the run's PostgreSQL database for a role
on first use (`migrated`: migrated once, emptied before each test by the fixture; `empty`: its
`public` schema recreated before each test), shared by every module of the run (kept in
`config.stash`) and dropped at the end of the session (tests/support/postgres.py creates and
drops them).

What it does not do: define fixtures (the conftest does), or reach any server but 127.0.0.1.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import Engine

from agent.settings import DatabaseSettings
from agent.store.engine import make_engine
from agent.store.migrate import upgrade
from tests.support.postgres import HOST, PORT, available, create_database, drop_database, url_for

TABLES = ("incident_events", "remediation_actions", "outbox_messages", "decisions", "incidents",
          "admission_decisions", "admission_groups", "admission_certificates")
TEST_DB_SETTINGS = DatabaseSettings(
    write_retry=timedelta(seconds=5), connect_timeout=timedelta(seconds=2)
)
_ENGINES: pytest.StashKey[dict[str, Engine]] = pytest.StashKey()


def admin_engine(config: pytest.Config, role: str) -> Engine:
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


def url_of(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=False)
