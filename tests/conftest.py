"""Settings of the whole test run: the Hypothesis profiles, the order tests start in, and an
environment without the terminal's size.

Who calls it: pytest, before the conftest of any test folder. `make test` runs the suite on
several pytest-xdist workers, each test file whole on one worker (`--dist loadfile`, so a
module-scoped fixture such as a twin or an agent run is built once); this module makes that run
finish early and reproducibly:

- Hypothesis profile `ci` (`--hypothesis-profile=ci`, which `make test` passes): every property
  test draws the same examples on every run and on whichever worker it lands, and no example
  database is read or written. Without the option the library's default applies (random draws,
  failing examples remembered in `.hypothesis/`), for exploring on a developer's machine.
- The files known to run long start first (`LONG_FIRST`), so that no worker is left running one
  of them alone at the end while the others idle.
- A few long files are not run whole on one worker (`pytest_xdist_make_scheduler`): in
  `SPREAD_TESTS` each test is a unit of its own (independent tests of tens of seconds each, the
  kill walks: spread over the workers instead of one worker running the file for minutes), in
  `SPREAD_FUNCTIONS` each test function with its parametrizations (a module-scoped fixture used
  by one function is still built once).
- `COLUMNS` and `LINES` are removed from every test's environment: a worker process inherits them
  from readline (80x24) where a plain run has none, and output widths must not depend on where a
  test runs. A test that wants a width sets it (monkeypatch.setenv).

The fixtures every folder may use live here (a folder's own live in its conftest): a fresh
incident database per test on SQLite and PostgreSQL. `db_url` is parametrized over both backends:
SQLite gets a copy of a template file migrated once per session (`sqlite_template`); PostgreSQL
uses one throwaway database per run, migrated once and emptied before each test (`pg_database`).
`empty_url` gives a database without any schema (SQLite: a new file; PostgreSQL: a second
throwaway database whose `public` schema is recreated before each test, `pg_empty_database`).
`store` is an incident store on `db_url`. PostgreSQL cases carry the `postgres` marker. Who uses
them: the tests of the store, the approvals, the commands, the runtime, the chat layer and the
soak's checks.

What it does not do: hold fixtures of one folder (each folder's conftest holds its own), or
change what any test checks or how long it may take.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from sqlalchemy import text

from agent.settings import DatabaseSettings
from agent.store.engine import make_engine
from agent.store.migrate import upgrade
from agent.store.repository import IncidentStore, open_store
from tests.support.databases import TABLES, TEST_DB_SETTINGS, admin_engine, url_of

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)

# The test files that take longest (each tens of seconds on 2 cores, most of it waiting on
# subprocesses, the twin, PostgreSQL or Prometheus), longest first. Order only: a file missing
# here still runs, after these, in collection order.
LONG_FIRST: tuple[str, ...] = (
    "tests/demo/test_demo.py",
    "tests/chatops/test_agent_chat.py",
    "tests/store/test_timeline_fold.py",
    "tests/remediation/test_kill_jobset.py",
    "tests/remediation/test_kill.py",
    "tests/commands/test_run.py",
    "tests/test_cli.py",
    "tests/commands/test_sweep.py",
    "tests/demo/test_gitops.py",
    "tests/deploy/test_rbac_usage.py",
    "tests/runtime/test_alert_flood.py",
    "tests/soak/test_soak.py",
    "tests/remediation/test_remediator_group.py",
    "tests/runtime/test_decision_http.py",
    "tests/runtime/test_agent_e2e.py",
    "tests/commands/test_hostile_cli.py",
    "tests/commands/test_incidents.py",
    "tests/remediation/test_remediator.py",
    "tests/runtime/test_pipeline.py",
    "tests/sources/test_alertmanager.py",
)
# Files not run whole on one worker (see the module's docstring): each test a unit; each test
# function (its parametrizations together) a unit.
SPREAD_TESTS: frozenset[str] = frozenset({
    "tests/remediation/test_kill.py",
    "tests/remediation/test_kill_jobset.py",
    "tests/store/test_timeline_fold.py",
})
SPREAD_FUNCTIONS: frozenset[str] = frozenset({"tests/demo/test_demo.py"})
_RANK = {path: rank for rank, path in enumerate(LONG_FIRST)}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # stable: within a file the collection order stays (its fixtures are set up as in a plain run)
    items.sort(key=lambda item: _RANK.get(item.nodeid.split("::", 1)[0], len(LONG_FIRST)))


def work_unit(nodeid: str) -> str:
    """The unit of `--dist loadfile` a test belongs to: its file, but the test itself in a file of
    `SPREAD_TESTS` and its function (no parameters) in a file of `SPREAD_FUNCTIONS`."""
    file = nodeid.split("::", 1)[0]
    if file in SPREAD_TESTS:
        return nodeid
    if file in SPREAD_FUNCTIONS:
        return nodeid.split("[", 1)[0]
    return file


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile` with the units of `work_unit` (any other --dist: xdist's own)."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling  # only where xdist runs the suite

    class SpreadScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return SpreadScheduling(config, log)


@pytest.fixture(autouse=True)
def _no_terminal_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)


# -- the incident databases ---------------------------------------------------------------------


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
    engine = admin_engine(request.config, "migrated")
    with engine.begin() as conn:
        for table in TABLES:
            conn.execute(text(f"DELETE FROM {table}"))
    return url_of(engine)


@pytest.fixture
def pg_empty_database(request: pytest.FixtureRequest) -> str:
    """A PostgreSQL database with nothing in it (its public schema recreated)."""
    engine = admin_engine(request.config, "empty")
    engine.dispose()  # no pooled connection may hold locks on the old schema
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()
    return url_of(engine)


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
