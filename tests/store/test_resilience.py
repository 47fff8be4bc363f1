"""The database away: unreachable at start (clear error, retries with backoff, not ready), and going
away mid-run (writes retried, none silently dropped). PostgreSQL sits behind a TCP proxy on
127.0.0.1 that the tests cut and restore; the shared server is never stopped."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta

import pytest
from sqlalchemy.engine import make_url

from agent.model.incident import FindingOutcome, IncidentQuery
from agent.settings import DatabaseSettings, Settings
from agent.store.errors import StoreUnavailableError
from agent.store.migrate import upgrade_on_start
from agent.store.repository import IncidentStore, open_store
from agent.store.resilience import Readiness
from tests.store.helpers import finding
from tests.store.tcp_proxy import TcpProxy
from tests.support.databases import TEST_DB_SETTINGS
from tests.support.waiting import wait

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg_url(pg_database: str) -> str:
    return pg_database


@pytest.fixture
def proxy(pg_url: str) -> Iterator[TcpProxy]:
    url = make_url(pg_url)
    with TcpProxy(url.host or "127.0.0.1", url.port or 5432) as p:
        yield p


def _via(proxy: TcpProxy, pg_url: str) -> str:
    return make_url(pg_url).set(host="127.0.0.1", port=proxy.port).render_as_string(
        hide_password=False
    )


def _settings(url: str, **db: object) -> Settings:
    return Settings(database=replace(TEST_DB_SETTINGS, url=url, **db))  # type: ignore[arg-type]


class RecordingSleep:
    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        time.sleep(seconds)


def test_unreachable_at_start_is_a_clear_error_after_backoff(proxy: TcpProxy, pg_url: str) -> None:
    proxy.cut()
    readiness = Readiness()
    sleep = RecordingSleep()
    settings = _settings(_via(proxy, pg_url), start_timeout=timedelta(seconds=1.5))
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError) as caught:
        upgrade_on_start(settings, readiness=readiness, sleep=sleep)
    elapsed = time.monotonic() - started
    message = str(caught.value)
    assert f"127.0.0.1:{proxy.port}" in message and "connect failed after" in message
    assert "\n" not in message
    assert not readiness.is_ready() and readiness.reason
    assert len(sleep.delays) >= 3
    assert sleep.delays == sorted(sleep.delays) and sleep.delays[1] == 2 * sleep.delays[0]
    assert elapsed < 15


def test_start_waits_for_the_database_then_migrates(proxy: TcpProxy, pg_url: str) -> None:
    proxy.cut()
    readiness = Readiness()
    result: list[IncidentStore] = []
    errors: list[BaseException] = []

    def start() -> None:
        try:
            result.append(upgrade_on_start(
                _settings(_via(proxy, pg_url), start_timeout=timedelta(seconds=30)),
                readiness=readiness,
            ))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=start)
    thread.start()
    wait(lambda: bool(readiness.reason), timeout=10, interval=0.02, what="a first failed attempt")
    assert not readiness.is_ready() and readiness.reason  # health endpoint: not ready
    proxy.restore()
    thread.join(timeout=30)
    assert errors == [] and len(result) == 1
    assert readiness.is_ready()
    assert result[0].list_incidents().incidents == []
    result[0].close()


def test_database_away_mid_run_writes_are_retried(proxy: TcpProxy, pg_url: str) -> None:
    sleep = RecordingSleep()
    store = open_store(replace(TEST_DB_SETTINGS, write_retry=timedelta(seconds=30)),
                       url=_via(proxy, pg_url), sleep=sleep)
    try:
        assert store.record_finding(finding("before")).new
        assert store.ready()
        proxy.cut()
        outcome: list[FindingOutcome] = []
        thread = threading.Thread(
            target=lambda: outcome.append(store.record_finding(finding("during")))
        )
        thread.start()
        wait(lambda: not store.ready(), timeout=10, interval=0.02,
             what="the store to notice the database is away")
        wait(lambda: len(sleep.delays) >= 3, timeout=10, interval=0.02, what="three retries")
        assert outcome == [] and thread.is_alive()  # still retrying, not dropped
        proxy.restore()
        thread.join(timeout=30)
        assert len(outcome) == 1 and outcome[0].new
        assert store.ready()
    finally:
        store.close()
    direct = open_store(TEST_DB_SETTINGS, url=pg_url)
    names = [i.name for i in direct.list_incidents(IncidentQuery()).incidents]
    direct.close()
    assert sorted(names) == ["before", "during"]


def test_database_gone_for_good_raises_instead_of_dropping(proxy: TcpProxy, pg_url: str) -> None:
    store = open_store(replace(TEST_DB_SETTINGS, write_retry=timedelta(seconds=1)),
                       url=_via(proxy, pg_url))
    try:
        store.record_finding(finding("before"))
        proxy.cut()
        with pytest.raises(StoreUnavailableError, match="record finding failed after"):
            store.record_finding(finding("lost"))
        assert not store.ping()
        proxy.restore()
        assert store.ping()
        assert store.record_finding(finding("after")).new  # the pool recovered
    finally:
        store.close()
    direct = open_store(DatabaseSettings(), url=pg_url)
    names = sorted(i.name for i in direct.list_incidents().incidents)
    direct.close()
    assert names == ["after", "before"]
