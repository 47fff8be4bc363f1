"""Fixtures for the store tests: a fresh migrated database per test, on SQLite and PostgreSQL."""

from tests.store.fixtures import (
    db_url,
    empty_url,
    pg_database,
    pg_empty_database,
    sqlite_template,
    store,
)

__all__ = ["db_url", "empty_url", "pg_database", "pg_empty_database", "sqlite_template", "store"]
