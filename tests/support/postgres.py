"""Throwaway PostgreSQL databases for tests, on the machine's server (127.0.0.1:5432, user postgres,
trust auth).

`throwaway_database()` is a context manager: it creates a database with a random name, yields its
`postgresql+psycopg://` URL and drops it at the end (`WITH (FORCE)`, so leftover connections of a
killed test process cannot keep it alive). `available()` says whether the server answers, so a
fixture can fail with a clear message instead of a connection traceback. It never stops, starts or
reconfigures the shared server. Each database it creates commits without waiting for the server's
WAL flush (`synchronous_commit = off`, a setting of that database only): a commit is as visible and
as safe against a killed client as before, and only a crash of the server itself, which no test
causes on the shared server, could lose the last ones; it saves a disk flush per transaction.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql

HOST = os.environ.get("ZONEMEDIC_TEST_PGHOST", "127.0.0.1")
PORT = int(os.environ.get("ZONEMEDIC_TEST_PGPORT", "5432"))
USER = os.environ.get("ZONEMEDIC_TEST_PGUSER", "postgres")


def admin_dsn(dbname: str = "postgres") -> str:
    return f"host={HOST} port={PORT} user={USER} dbname={dbname} connect_timeout=5"


def url_for(dbname: str, *, host: str = HOST, port: int = PORT) -> str:
    return f"postgresql+psycopg://{USER}@{host}:{port}/{dbname}"


def available() -> bool:
    try:
        with psycopg.connect(admin_dsn(), autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.OperationalError:
        return False
    return True


def create_database(prefix: str = "zonemedic_test") -> str:
    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"
    with psycopg.connect(admin_dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        conn.execute(
            sql.SQL("ALTER DATABASE {} SET synchronous_commit = off").format(sql.Identifier(name))
        )
    return name


def drop_database(name: str) -> None:
    with psycopg.connect(admin_dsn(), autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@contextmanager
def throwaway_database(prefix: str = "zonemedic_test") -> Iterator[str]:
    """Create a database with a random name, yield its URL, drop it afterwards."""
    if not available():
        raise RuntimeError(
            f"PostgreSQL is not answering on {HOST}:{PORT} as {USER} "
            "(.ci/run starts it; or run the suite with -m 'not postgres')"
        )
    name = create_database(prefix)
    try:
        yield url_for(name)
    finally:
        drop_database(name)
