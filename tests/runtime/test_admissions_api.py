"""`GET /api/admissions` over the real store through the HTTP app: the recorded decisions, their
filters, the week's summary, and the same access check as the incidents API."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from agent.approval.approvers import Authority
from agent.model.admission import AdmissionOutcome, AdmissionRecord
from agent.runtime.http import build_app
from agent.runtime.incidents import StoreIncidents
from agent.runtime.metrics import AgentMetrics
from agent.runtime.server import HttpServer
from agent.store.repository import IncidentStore

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def record(name: str, outcome: AdmissionOutcome, *, ago: timedelta, ns: str = "ml") -> AdmissionRecord:
    return AdmissionRecord(
        cluster="prod", request_uid=f"u-{name}", decided_at=NOW - ago, job_kind="PyTorchJob",
        job_namespace=ns, job_name=name, object_kind="PyTorchJob", object_name=name,
        outcome=outcome, zone="a" if outcome is AdmissionOutcome.PLACED else None, mode="enforce",
        warning=f"zonemedic: {name}",
    )  # fmt: skip


@pytest.fixture
def client(store: IncidentStore) -> Iterator[httpx.Client]:
    store.record_admission(record("placed", AdmissionOutcome.PLACED, ago=timedelta(hours=1)))
    store.record_admission(record("passed", AdmissionOutcome.CONSTRAINED, ago=timedelta(hours=2),
                                  ns="nlp"))  # fmt: skip
    store.record_admission(record("old", AdmissionOutcome.PLACED, ago=timedelta(days=10)))
    app = build_app(metrics=AgentMetrics(), readiness=lambda: {},
                    incidents=StoreIncidents(store, cluster="prod", now=lambda: NOW,
                                             authority=Authority()))  # fmt: skip
    server = HttpServer(app, host="127.0.0.1", port=0).start()
    try:
        with httpx.Client(base_url=server.url, timeout=10) as c:
            yield c
    finally:
        server.stop()


def test_the_decisions_and_the_weeks_summary(client: httpx.Client) -> None:
    answer = client.get("/api/admissions")
    assert answer.status_code == 200
    body = answer.json()
    assert [a["job"]["name"] for a in body["admissions"]] == ["placed", "passed", "old"]
    assert body["week"] == {"placed": 1, "restarts_avoided": 1,
                            "by_outcome": {"placed": 1, "constrained": 1}}  # fmt: skip
    assert body["admissions"][0]["warning"] == "zonemedic: placed"
    recent = client.get("/api/admissions", params={"since": "1d", "namespace": "ml"}).json()
    assert [a["job"]["name"] for a in recent["admissions"]] == ["placed"]
    passed = client.get("/api/admissions", params={"outcome": "constrained"}).json()
    assert [a["job"]["name"] for a in passed["admissions"]] == ["passed"]


@pytest.mark.parametrize(("params", "message"), [
    ({"outcome": "maybe"}, "outcome"),
    ({"since": "soon"}, "since"),
    ({"limit": "0"}, "limit"),
    ({"colour": "red"}, "unknown query parameter 'colour'"),
])
def test_bad_filters_are_400_naming_the_parameter(client: httpx.Client, params: dict[str, str],
                                                  message: str) -> None:  # fmt: skip
    answer = client.get("/api/admissions", params=params)
    assert answer.status_code == 400 and message in answer.json()["error"]


def test_behind_the_api_token_like_the_incidents_api(store: IncidentStore) -> None:
    app = build_app(metrics=AgentMetrics(), readiness=lambda: {}, api_token="s3cret",
                    incidents=StoreIncidents(store, cluster="prod", now=lambda: NOW,
                                             authority=Authority()))  # fmt: skip

    async def get(headers: dict[str, str]) -> int:
        transport = httpx.ASGITransport(app=app, client=("10.1.2.3", 5000))
        async with httpx.AsyncClient(transport=transport, base_url="http://agent") as c:
            return (await c.get("/api/admissions", headers=headers)).status_code

    assert asyncio.run(get({})) == 401
    assert asyncio.run(get({"Authorization": "Bearer s3cret"})) == 200
