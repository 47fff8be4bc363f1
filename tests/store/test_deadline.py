"""Store calls a request waits on: a `deadline` block bounds them (retries and lock waits included),
on SQLite (another connection holds the write lock) and PostgreSQL (another session locks the
incident table); outside a block the configured timeouts apply again. The write probe tells
whether a write transaction can start now (lock held, server away, read-only)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta

import pytest
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from agent.store.engine import make_engine
from agent.store.errors import StoreUnavailableError
from agent.store.probe import write_blocker
from agent.store.repository import open_store
from agent.store.resilience import deadline, time_left
from tests.store.helpers import finding
from tests.store.tcp_proxy import TcpProxy
from tests.support.databases import TEST_DB_SETTINGS

# long enough that a test would notice waiting for them
PATIENT = replace(TEST_DB_SETTINGS, write_retry=timedelta(seconds=30), busy_timeout=timedelta(seconds=30))
SHORT = timedelta(milliseconds=500)


@contextmanager
def writes_blocked(url: str) -> Iterator[None]:
    """Another connection takes the write lock (SQLite) or locks the incident table (PostgreSQL)."""
    if url.startswith("sqlite"):
        conn = sqlite3.connect(make_url(url).database or "", isolation_level=None)
        conn.execute("BEGIN EXCLUSIVE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()
        return
    engine = make_engine(url)
    try:
        with engine.connect() as other, other.begin():
            other.exec_driver_sql("LOCK TABLE incidents IN EXCLUSIVE MODE")
            yield
    finally:
        engine.dispose()


def test_time_left_inside_nested_blocks() -> None:
    assert time_left() is None
    with deadline(timedelta(seconds=10)):
        outer = time_left()
        assert outer is not None and 9 < outer <= 10
        with deadline(timedelta(seconds=60)):  # an inner block cannot extend the outer one
            inner = time_left()
            assert inner is not None and inner <= 10
        with deadline(timedelta(seconds=1)):
            inner = time_left()
            assert inner is not None and inner <= 1
        assert (time_left() or 0) > 1
    assert time_left() is None


def test_a_deadline_bounds_a_write_the_database_refuses(db_url: str) -> None:
    store = open_store(PATIENT, url=db_url)
    try:
        with writes_blocked(db_url):
            started = time.monotonic()
            with pytest.raises(StoreUnavailableError, match="record finding failed after"), deadline(SHORT):
                store.record_finding(finding("during"))
            assert time.monotonic() - started < 3.0  # not write_retry (30 s), not busy_timeout
            assert store.list_incidents().incidents == []  # reads still pass; nothing written
        assert store.record_finding(finding("after")).new  # outside the block: a plain write
    finally:
        store.close()


def test_outside_a_block_the_configured_timeouts_apply_again(db_url: str) -> None:
    store = open_store(PATIENT, url=db_url)
    try:
        with deadline(SHORT):
            store.record_finding(finding("inside"))
        with store.engine.begin() as conn:
            if db_url.startswith("sqlite"):
                assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30_000
            else:
                assert conn.exec_driver_sql("SHOW statement_timeout").scalar() == "0"
        with deadline(SHORT), store.engine.begin() as conn:
            if db_url.startswith("sqlite"):
                assert 0 < conn.exec_driver_sql("PRAGMA busy_timeout").scalar() <= 500
            else:
                assert conn.exec_driver_sql("SHOW statement_timeout").scalar().endswith("ms")
    finally:
        store.close()


def test_the_write_probe_sees_a_held_write_lock(db_url: str) -> None:
    engine = make_engine(db_url, PATIENT)
    try:
        assert write_blocker(engine, timeout=SHORT) is None
        with writes_blocked(db_url):
            started = time.monotonic()
            reason = write_blocker(engine, timeout=SHORT)
            assert time.monotonic() - started < 3.0
            assert reason is not None and ("locked" in reason or "timeout" in reason), reason
        assert write_blocker(engine, timeout=SHORT) is None
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_the_write_probe_sees_a_server_away_and_a_read_only_database(pg_database: str) -> None:
    url = make_url(pg_database)
    with TcpProxy(url.host or "127.0.0.1", url.port or 5432) as proxy:
        via = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
        engine = make_engine(via, TEST_DB_SETTINGS)
        try:
            assert write_blocker(engine, timeout=SHORT) is None
            proxy.cut()
            assert write_blocker(engine, timeout=SHORT) is not None
            proxy.restore()
            assert write_blocker(engine, timeout=SHORT) is None
        finally:
            engine.dispose()
    read_only = create_engine(
        url.set(drivername="postgresql+psycopg"),
        connect_args={"options": "-c default_transaction_read_only=on"},
    )
    try:
        assert write_blocker(read_only, timeout=SHORT) == "the database is read-only"
    finally:
        read_only.dispose()
