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
from contextlib import ExitStack
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

import httpx
import orjson
import pytest
from sqlalchemy.engine import make_url

from agent.model.incident import IncidentQuery
from agent.model.lifecycle import MessageKind
from agent.runtime.app import Agent
from agent.settings import Settings
from agent.store.repository import IncidentStore, open_store
from agent.twin.cluster import TwinCluster
from tests.store.tcp_proxy import TcpProxy
from tests.support.agent_rig import running_agent
from tests.support.databases import TEST_DB_SETTINGS
from tests.support.waiting import wait
from tests.twin import twin_fixtures

JOB = "llm-finetune"


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


def outage_settings(url: str) -> Callable[[Settings], Settings]:
    """The database at `url` with quick give-ups (a write retried after 1 s, SQLite's busy
    timeout 300 ms, a 1 s connect timeout), /readyz's database check within 1 s, and a 200 ms
    detection debounce."""

    def change(base: Settings) -> Settings:
        return replace(
            base,
            database=replace(
                base.database,
                url=url,
                write_retry=timedelta(seconds=1),
                busy_timeout=timedelta(milliseconds=300),
                connect_timeout=timedelta(seconds=1),
            ),
            http=replace(base.http, database_timeout=timedelta(seconds=1)),
            detection=replace(base.detection, debounce=timedelta(milliseconds=200)),
        )

    return change


def close_retries(agent: Agent) -> None:
    agent.detector.retry_cap = timedelta(seconds=1)  # keep the retries of a failed batch close


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def running(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Running]:
    scenario = twin_fixtures.fast("seed-blocked")
    (job,) = [o for o in scenario.objects if o.get("kind") == "PyTorchJob"]
    without_job = replace(scenario, objects=[o for o in scenario.objects if o is not job])
    with ExitStack() as stack:
        outage: Outage
        if request.param == "sqlite":
            db = tmp_path / "zonemedic.db"
            url = direct_url = f"sqlite:///{db}"
            outage = SqliteWriteLock(db)
        else:
            direct_url = request.getfixturevalue("pg_database")
            parsed = make_url(direct_url)
            proxy = TcpProxy(parsed.host or "127.0.0.1", parsed.port or 5432)
            stack.callback(proxy.close)
            url = parsed.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
            outage = ProxyCut(proxy)
        rig = stack.enter_context(running_agent(
            tmp_path, without_job, leader_election=False, settings_change=outage_settings(url),
            before_start=close_retries,
        ))  # fmt: skip
        direct = open_store(TEST_DB_SETTINGS, url=direct_url)
        stack.callback(direct.close)
        run = Running(rig.cluster, rig.agent, direct, outage, job)
        stack.callback(run.http.close)
        stack.callback(outage.end)  # before the agent stops: its last writes must go through
        wait(lambda: run.readyz().status_code == 200, timeout=30, what="the agent to be ready")
        yield run


def _not_ready_for_writes(run: Running) -> dict[str, Any] | None:
    response = run.readyz()
    body: dict[str, Any] = response.json()
    return body if response.status_code == 503 and body["checks"]["database_writes"] is False else None


def test_a_split_during_the_outage_is_recorded_once_the_database_is_back(running: Running) -> None:
    run = running
    run.outage.begin()
    wait(lambda: _not_ready_for_writes(run), timeout=30, what="/readyz to say writes fail")
    run.cluster.apply(copy.deepcopy(run.job))  # the job arrives and splits while writes fail
    wait(
        lambda: run.counter("zonemedic_store_write_retries_total", work="detector") >= 2,
        timeout=30,
        what="the failed detector batch to be retried",
    )
    assert run.incidents() == []  # nothing recorded (and nothing dropped: it is being retried)
    assert run.counter("zonemedic_store_write_failures_total", work="detector") >= 2

    run.outage.end()
    (incident,) = wait(lambda: run.incidents("zone_split_blocked"), timeout=15, what="the incident")
    # the shipped zone-split playbook proposes the fix: the incident awaits an approval
    assert incident.status.value in {"open", "awaiting_approval"}
    wait(lambda: run.readyz().status_code == 200, timeout=30, what="/readyz to recover")
    wait(lambda: run.agent.pipeline.actions.unfired == 0, timeout=30, what="playbook firings")

    def posts() -> list[str]:
        messages = run.direct.get_incident(incident.id).messages
        return sorted(m.payload["action"] for m in messages if m.kind is MessageKind.POST)

    # the firing (with its plan preview, read from the API) may still be under way
    wait(lambda: len(posts()) >= 2, timeout=30, what="both playbook messages")
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


def co_located(job: dict[str, Any]) -> dict[str, Any]:
    """The job with every pod in the GPU zone (healthy: no incident of its own), so the alerts
    about it are its only problem (a job has one open incident, which they would fold into)."""
    out = copy.deepcopy(job)
    for spec in out["spec"]["pytorchReplicaSpecs"].values():
        pod = spec["template"]["spec"]
        pod["nodeSelector"] = {"topology.kubernetes.io/zone": "us-east-1a"}
        pod["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    return out


def test_alerts_posted_during_the_outage_are_503_then_recorded_exactly_once(running: Running) -> None:
    run = running
    run.cluster.apply(co_located(run.job))
    wait(lambda: run.agent.cache.jobs_named("ml", JOB), timeout=15, what="the job in the cache")
    run.outage.begin()
    for _ in range(2):  # Alertmanager's first send and a re-send, both during the outage
        response, took = _post(run)
        assert response.status_code == 503, response.text
        assert "retry later" in response.json()["error"]
        assert took < 5.0, f"the webhook took {took:.1f}s to refuse"
    assert run.incidents("alert") == []
    body = wait(lambda: _not_ready_for_writes(run), timeout=30, what="/readyz to say writes fail")
    assert body["ready"] is False

    run.outage.end()
    # Alertmanager keeps re-sending until it gets a 2xx
    accepted = wait(
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
    wait(lambda: run.readyz().status_code == 200, timeout=30, what="/readyz to recover")
