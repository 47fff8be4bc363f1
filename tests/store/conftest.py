"""Fixtures for the store tests: a fresh migrated database per test, on SQLite and PostgreSQL."""

from tests.store.fixtures import db_url, pg_database, sqlite_template, store

__all__ = ["db_url", "pg_database", "sqlite_template", "store"]
