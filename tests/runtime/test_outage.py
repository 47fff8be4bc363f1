"""Nothing lost while the database refuses writes: the agent in-process on the twin (real watch,
real HTTP), its database on SQLite (another connection holds the write lock: `BEGIN EXCLUSIVE`) or
PostgreSQL (behind a TCP proxy the test cuts; the shared server is never touched).

- A job that splits during the outage: its detector batch fails, is retried with backoff, and the
  incident (and its playbook messages) is recorded exactly once shortly after the database is back.
- Alerts posted during the outage get 503 promptly (never 200 "duplicate"), every re-send too;
  once the database is back the re-send is recorded exactly once, and later re-sends are duplicates.
- /readyz is 503 (database_writes false) during the outage and 200 after; the write failure and
  retry counters count it.
"""

from __future__ import annotations

import copy
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol, TypeVar

import httpx
import orjson
import pytest
from sqlalchemy.engine import make_url

from agent.model.incident import IncidentQuery
from agent.model.lifecycle import MessageKind
from agent.runtime.app import Agent
from agent.runtime.pipeline import AgentPipeline
from agent.settings import Settings, load_settings
from agent.store.migrate import upgrade_on_start
from agent.store.repository import IncidentStore, open_store
from agent.twin import kubeconfig
from agent.twin.cluster import TwinCluster
from tests.store.fixtures import TEST_DB_SETTINGS, pg_database  # noqa: F401 (a fixture)
from tests.store.tcp_proxy import TcpProxy
from tests.twin import twin_fixtures

REPO = Path(__file__).resolve().parents[2]
JOB = "llm-finetune"
T = TypeVar("T")


class Outage(Protocol):
    def begin(self) -> None: ...

    def end(self) -> None: ...


class SqliteWriteLock:
    """Another connection holds the database's write lock (reads still work under WAL)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn: sqlite3.Connection | None = None

    def begin(self) -> None:
        self.conn = sqlite3.connect(self.path, isolation_level=None, timeout=10)
        self.conn.execute("BEGIN EXCLUSIVE")

    def end(self) -> None:
        if self.conn is not None:
            self.conn.execute("ROLLBACK")
            self.conn.close()
            self.conn = None


class ProxyCut:
    def __init__(self, proxy: TcpProxy) -> None:
        self.proxy = proxy

    def begin(self) -> None:
        self.proxy.cut()

    def end(self) -> None:
        self.proxy.restore()


def wait_for(check: Callable[[], T], *, timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


class Running:
    def __init__(
        self, cluster: TwinCluster, agent: Agent, direct: IncidentStore, outage: Outage, job: dict[str, Any]
    ) -> None:
        self.cluster = cluster
        self.agent = agent
        self.direct = direct  # the same database, not through the outage (reads for the asserts)
        self.outage = outage
        self.job = job
        self.http = httpx.Client(base_url=agent.url, timeout=30)

    def incidents(self, verdict: str | None = None) -> list[Any]:
        found = self.direct.list_incidents(IncidentQuery(cluster="twin", namespace="ml", name=JOB)).incidents
        return [i for i in found if verdict is None or i.verdict.value == verdict]

    def counter(self, name: str, **labels: str) -> float:
        return self.agent.metrics.registry.get_sample_value(name, labels) or 0.0

    def readyz(self) -> httpx.Response:
        return self.http.get("/readyz")


def settings_for(tmp_path: Path, kubeconfig_path: Path, url: str) -> Settings:
    base = load_settings(None, {})
    return replace(
        base,
        cluster_name="twin",
        data_dir=str(tmp_path),
        playbooks_dir=str(REPO / "playbooks"),
        kubernetes=replace(base.kubernetes, kubeconfig=str(kubeconfig_path)),
        database=replace(
            base.database,
            url=url,
            write_retry=timedelta(seconds=1),
            busy_timeout=timedelta(milliseconds=300),
            connect_timeout=timedelta(seconds=1),
        ),
        http=replace(base.http, host="127.0.0.1", port=0, database_timeout=timedelta(seconds=1)),
        leader_election=replace(base.leader_election, enabled=False),
        detection=replace(base.detection, debounce=timedelta(milliseconds=200)),
    )


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def running(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Running]:
    scenario = twin_fixtures.fast("seed-blocked")
    (job,) = [o for o in scenario.objects if o.get("kind") == "PyTorchJob"]
    cluster = TwinCluster(replace(scenario, objects=[o for o in scenario.objects if o is not job]))
    cluster.start()
    proxy: TcpProxy | None = None
    try:
        api = cluster.serve_api()
        path = kubeconfig.write(tmp_path / "kubeconfig", api.url)
        outage: Outage
        if request.param == "sqlite":
            db = tmp_path / "zonemedic.db"
            url = direct_url = f"sqlite:///{db}"
            outage = SqliteWriteLock(db)
        else:
            direct_url = request.getfixturevalue("pg_database")
            parsed = make_url(direct_url)
            proxy = TcpProxy(parsed.host or "127.0.0.1", parsed.port or 5432)
            url = parsed.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
            outage = ProxyCut(proxy)
        settings = settings_for(tmp_path, path, url)
        store = upgrade_on_start(settings)
        direct = open_store(TEST_DB_SETTINGS, url=direct_url)
        agent = Agent(settings, pipeline_factory=lambda parts: AgentPipeline(parts, store))
        agent.detector.retry_cap = timedelta(seconds=1)  # keep the retries of a failed batch close
        agent.start()
        run = Running(cluster, agent, direct, outage, job)
        try:
            wait_for(lambda: run.readyz().status_code == 200, timeout=30, what="the agent to be ready")
            yield run
        finally:
            outage.end()
            run.http.close()
            agent.stop()
            store.close()
            direct.close()
    finally:
        if proxy is not None:
            proxy.close()
        cluster.stop()


def _not_ready_for_writes(run: Running) -> dict[str, Any] | None:
    response = run.readyz()
    body: dict[str, Any] = response.json()
    return body if response.status_code == 503 and body["checks"]["database_writes"] is False else None


def test_a_split_during_the_outage_is_recorded_once_the_database_is_back(running: Running) -> None:
    run = running
    run.outage.begin()
    wait_for(lambda: _not_ready_for_writes(run), timeout=30, what="/readyz to say writes fail")
    run.cluster.apply(copy.deepcopy(run.job))  # the job arrives and splits while writes fail
    wait_for(
        lambda: run.counter("zonemedic_store_write_retries_total", work="detector") >= 2,
        timeout=30,
        what="the failed detector batch to be retried",
    )
    assert run.incidents() == []  # nothing recorded (and nothing dropped: it is being retried)
    assert run.counter("zonemedic_store_write_failures_total", work="detector") >= 2

    run.outage.end()
    (incident,) = wait_for(lambda: run.incidents("zone_split_blocked"), timeout=15, what="the incident")
    # the shipped zone-split playbook proposes the fix: the incident awaits an approval
    assert incident.status.value in {"open", "awaiting_approval"}
    wait_for(lambda: run.readyz().status_code == 200, timeout=30, what="/readyz to recover")
    wait_for(lambda: run.agent.pipeline.actions.unfired == 0, timeout=30, what="playbook firings")

    def posts() -> list[str]:
        messages = run.direct.get_incident(incident.id).messages
        return sorted(m.payload["action"] for m in messages if m.kind is MessageKind.POST)

    # the firing (with its plan preview, read from the API) may still be under way
    wait_for(lambda: len(posts()) >= 2, timeout=30, what="both playbook messages")
    # exactly once: one incident, each playbook message queued once
    assert len(run.incidents()) == 1
    assert posts() == ["notify", "propose_colocation"]
    final = run.direct.get_incident(incident.id).incident
    assert final.status.value == "awaiting_approval"
    assert final.approval_deadline is not None


def alert(name: str, fingerprint: str) -> dict[str, Any]:
    labels = {"alertname": name, "severity": "warning", "namespace": "ml", "created_by_name": JOB}
    return {"labels": labels, "startsAt": "2026-11-30T10:00:00Z", "fingerprint": fingerprint}


# one group of two alerts about the job (both of the alert verdict class: one incident, two detections)
GROUP = [alert("TrainingJobGPUUtilizationDrop", "outage-1"), alert("GPUUtilizationLow", "outage-2")]


def _post(run: Running) -> tuple[httpx.Response, float]:
    body = orjson.dumps({"version": "4", "status": "firing", "alerts": GROUP})
    started = time.monotonic()
    response = run.http.post("/alertmanager", content=body)
    return response, time.monotonic() - started


def test_alerts_posted_during_the_outage_are_503_then_recorded_exactly_once(running: Running) -> None:
    run = running
    run.cluster.apply(copy.deepcopy(run.job))
    wait_for(lambda: run.agent.cache.jobs_named("ml", JOB), timeout=15, what="the job in the cache")
    run.outage.begin()
    for _ in range(2):  # Alertmanager's first send and a re-send, both during the outage
        response, took = _post(run)
        assert response.status_code == 503, response.text
        assert "retry later" in response.json()["error"]
        assert took < 5.0, f"the webhook took {took:.1f}s to refuse"
    assert run.incidents("alert") == []
    body = wait_for(lambda: _not_ready_for_writes(run), timeout=30, what="/readyz to say writes fail")
    assert body["ready"] is False

    run.outage.end()
    # Alertmanager keeps re-sending until it gets a 2xx
    accepted = wait_for(
        lambda: (r := _post(run)[0]).status_code == 200 and r.json(), timeout=15, what="a 200"
    )
    assert (accepted["accepted"], accepted["duplicates"]) == (2, 0)
    again, _ = _post(run)
    assert again.status_code == 200 and again.json()["duplicates"] == 2
    (incident,) = run.incidents("alert")
    detail = run.direct.get_incident(incident.id)
    # each alert recorded once: the first opens the incident, the second is its one re-detection
    assert [e.kind.value for e in detail.events] == ["detected", "redetected"]
    assert incident.detections == 2
    assert [m.payload["playbook"] for m in detail.messages] == ["gpu-utilization-drop"]
    assert run.counter("zonemedic_alertmanager_alerts_total", outcome="unavailable") >= 2
    assert run.counter("zonemedic_store_write_failures_total", work="alert") >= 2
    assert run.counter("zonemedic_store_write_retries_total", work="alert") >= 1
    wait_for(lambda: run.readyz().status_code == 200, timeout=30, what="/readyz to recover")
