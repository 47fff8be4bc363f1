"""Database URL resolution and engine setup for SQLite and PostgreSQL.

Who calls it: `agent.store.repository.open_store`, `agent.store.migrate`, and the `db`/`incidents`
commands (through `database_url`). What it does not do: create tables (migrations do) or retry.

- One URL selects the backend. `postgresql://` and `postgres://` are rewritten to the psycopg 3
  driver (`postgresql+psycopg://`); `sqlite:///relative` and `sqlite:////absolute` are files whose
  directory is created when missing (a clear `InputError` when it cannot be).
- SQLite connections get WAL, `busy_timeout`, `foreign_keys=ON`, `synchronous=NORMAL`, and write
  transactions start with `BEGIN IMMEDIATE` (the write lock is taken up front, so two writers queue on
  busy_timeout instead of failing on a lock upgrade). Read-only work uses `read_engine(engine)`, which
  begins DEFERRED so readers never wait for writers under WAL.
- PostgreSQL connections get a connect timeout and `pool_pre_ping` (a connection that died while idle
  in the pool is replaced before use, not handed to a query).
- Inside a `agent.store.resilience.deadline` block, each transaction is bounded by the time left:
  SQLite's busy timeout (set at every BEGIN, back to `database.busy_timeout` outside a block) and
  PostgreSQL's `statement_timeout` (`SET LOCAL`, this transaction only). Lock waits then end in an
  error the retrier classifies as transient, instead of outlasting the caller's budget.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from agent.errors import InputError
from agent.settings import DatabaseSettings, Settings
from agent.store.resilience import time_left

DEFAULT_FILE_NAME = "zonemedic.db"
_BEGIN_OPTION = "zonemedic_sqlite_begin"


def database_url(settings: Settings, override: str | None = None) -> str:
    """The URL to use: `--database` override, else the config's `database.url` when it was set,
    else the default SQLite file under `settings.data_dir`."""
    if override:
        return override
    if settings.database.url != DatabaseSettings().url:
        return settings.database.url
    return f"sqlite:///{Path(settings.data_dir) / DEFAULT_FILE_NAME}"


def normalise_url(url: str) -> URL:
    """Parse a database URL and pin the driver; an unsupported or unparsable URL is an InputError."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise InputError(f"database URL {url!r} cannot be parsed") from None
    backend = parsed.get_backend_name()
    if backend in ("postgresql", "postgres"):
        return parsed.set(drivername="postgresql+psycopg")
    if backend == "sqlite":
        if parsed.get_driver_name() not in ("", "pysqlite"):
            raise InputError(f"database URL {url!r}: only the built-in sqlite driver is supported")
        return parsed.set(drivername="sqlite")
    raise InputError(
        f"database URL {url!r}: unsupported backend {backend!r} (use sqlite:/// or postgresql://)"
    )


def _ensure_sqlite_directory(url: URL) -> None:
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    directory = Path(database).expanduser().parent
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(
            f"database directory {directory} cannot be created: {exc.strerror or exc} "
            "(set data_dir, database.url or --database)"
        ) from None


def _configure_sqlite(engine: Engine, busy_timeout: timedelta) -> None:
    busy_ms = int(busy_timeout.total_seconds() * 1000)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event issue BEGIN itself (pysqlite's implicit BEGIN is deferred).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"PRAGMA busy_timeout = {busy_ms}")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA foreign_keys = ON")
            cursor.execute("PRAGMA synchronous = NORMAL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        mode = connection.get_execution_options().get(_BEGIN_OPTION, "IMMEDIATE")
        left = time_left()
        wait_ms = busy_ms if left is None else min(busy_ms, int(left * 1000))
        connection.exec_driver_sql(f"PRAGMA busy_timeout = {wait_ms}")
        connection.exec_driver_sql(f"BEGIN {mode}")


def _configure_postgres(engine: Engine) -> None:
    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        left = time_left()
        if left is not None:  # 0 would mean "no timeout": at least 1 ms
            connection.exec_driver_sql(f"SET LOCAL statement_timeout = {max(1, int(left * 1000))}")


def make_engine(url: str, settings: DatabaseSettings | None = None) -> Engine:
    """Build the engine for `url` with the per-backend setup above."""
    settings = settings or DatabaseSettings()
    parsed = normalise_url(url)
    timeout_s = max(1, int(settings.connect_timeout.total_seconds()))
    if parsed.get_backend_name() == "sqlite":
        _ensure_sqlite_directory(parsed)
        engine = create_engine(
            parsed,
            connect_args={"timeout": settings.busy_timeout.total_seconds(), "check_same_thread": False},
        )
        _configure_sqlite(engine, settings.busy_timeout)
        return engine
    engine = create_engine(
        parsed,
        pool_pre_ping=True,
        pool_size=settings.pool_size,
        max_overflow=settings.pool_size,
        pool_timeout=timeout_s,
        connect_args={"connect_timeout": timeout_s},
    )
    _configure_postgres(engine)
    return engine


def read_engine(engine: Engine) -> Engine:
    """The same engine (same pool) for read-only work: SQLite transactions begin DEFERRED."""
    return engine.execution_options(**{_BEGIN_OPTION: "DEFERRED"})


def is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite"
