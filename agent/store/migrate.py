"""Schema migrations (Alembic, scripts in the top-level `migrations/`), driven from code.

Who calls it: `zonemedic db upgrade|current|check` and the runtime at start (`upgrade_on_start`).
No `alembic.ini` is needed: the configuration is built here, and the migration scripts are found
(1) at `database.migrations_dir` when set; else (2) at `migrations/` beside the `agent` package,
which is the repository root for an editable install (`make install`) and a source checkout; else
(3) at `<sys.prefix>/share/zonemedic/migrations`, where a wheel install puts them when pyproject
ships `migrations/` as data-files (a non-editable install, e.g. the container image). The scripts
stay where the product owner fixed them (top level) instead of being duplicated inside the
package; a missing directory is a clear `StoreError` naming every place looked at.

`upgrade_on_start(settings)` waits for the database (retrying with backoff up to
`database.start_timeout`; the store's readiness flag says "not ready" meanwhile), then upgrades to
head when `database.migrate_on_start` is true, or checks that the schema is at head otherwise. On
PostgreSQL the upgrade holds an advisory lock, so two replicas starting together migrate once.

What it does not do: write migrations (developers run Alembic's autogenerate against
`agent.store.schema`), or downgrade at start.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import Connection, Engine, text

import agent
from agent.settings import DatabaseSettings, Settings
from agent.store.engine import database_url
from agent.store.errors import SchemaOutOfDateError, StoreError, safe_url, translated
from agent.store.repository import IncidentStore, open_store
from agent.store.resilience import Readiness
from agent.store.schema import metadata

_PG_LOCK_KEY = 0x7A6F6E65  # "zone": the advisory lock serialising migrations across replicas


def candidate_dirs(settings: DatabaseSettings) -> list[Path]:
    """Where the Alembic scripts may be, in order (see the module docstring)."""
    if settings.migrations_dir:
        return [Path(settings.migrations_dir)]
    return [
        Path(agent.__file__).resolve().parent.parent / "migrations",
        Path(sys.prefix) / "share" / "zonemedic" / "migrations",
    ]


def migrations_dir(settings: DatabaseSettings) -> Path:
    """The first candidate directory holding `env.py`; a clear error naming them all otherwise."""
    candidates = candidate_dirs(settings)
    for candidate in candidates:
        if (candidate / "env.py").is_file():
            return candidate
    looked = " or ".join(str(c) for c in candidates)
    raise StoreError(
        f"migration scripts not found at {looked} "
        "(set database.migrations_dir to the directory holding env.py and versions/)"
    )


def alembic_config(settings: DatabaseSettings, connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir(settings)))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision(settings: DatabaseSettings) -> str | None:
    return _head_of(migrations_dir(settings))


@functools.lru_cache(maxsize=8)
def _head_of(directory: Path) -> str | None:
    config = Config()
    config.set_main_option("script_location", str(directory))
    return ScriptDirectory.from_config(config).get_current_head()


def current_revision(engine: Engine) -> str | None:
    with translated(safe_url(str(engine.url)), "read the schema revision"), engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine, settings: DatabaseSettings, revision: str = "head") -> str | None:
    """Upgrade the schema to `revision` in one transaction; returns the revision reached."""
    with translated(safe_url(str(engine.url)), f"upgrade to {revision}"), engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
        try:
            command.upgrade(alembic_config(settings, conn), revision)
        except CommandError as exc:
            raise StoreError(f"migration to {revision!r} failed: {exc}") from None
        return MigrationContext.configure(conn).get_current_revision()


def schema_diff(engine: Engine) -> list[Any]:
    """Differences between the database schema and the models (empty: no drift)."""
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "render_as_batch": True}
        )
        diff: list[Any] = compare_metadata(context, metadata)
        return diff


def upgrade_on_start(
    settings: Settings,
    *,
    url: str | None = None,
    readiness: Readiness | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> IncidentStore:
    """The runtime's start-up step: reach the database (with retries), then migrate or check."""
    store = open_store(
        settings.database, url=database_url(settings, url), readiness=readiness, sleep=sleep
    )
    store.wait_until_reachable(settings.database.start_timeout)
    try:
        if settings.database.migrate_on_start:
            upgrade(store.engine, settings.database)
        else:
            check_schema(store.engine, settings.database, hint="database.migrate_on_start: true")
    except BaseException:
        store.close()
        raise
    return store


def check_schema(engine: Engine, settings: DatabaseSettings, *, hint: str | None = None) -> None:
    """Raise `SchemaOutOfDateError` unless the database is at this code's migration head."""
    current, head = current_revision(engine), head_revision(settings)
    if current != head:
        extra = f" (or set {hint})" if hint else ""
        raise SchemaOutOfDateError(
            f"database schema is at revision {current or 'none'}, this zonemedic needs {head}: "
            f"run `zonemedic db upgrade`{extra}"
        )
