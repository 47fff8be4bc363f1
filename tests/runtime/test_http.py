"""The HTTP app under real uvicorn on a free loopback port: health, readiness, metrics, the
Alertmanager webhook's status codes, and the incidents API's auth and filters."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import orjson
import pytest

from agent.errors import InputError
from agent.runtime.alerts import AlertReceiver
from agent.runtime.http import IncidentFilter, build_app, parse_filters
from agent.runtime.metrics import AgentMetrics
from agent.runtime.server import HttpServer
from agent.sources.alertmanager import Alert
from agent.sources.jobkey import JobKey

RESNET = JobKey("PyTorchJob", "ml", "resnet")


class Incidents:
    """A two-row incident table standing in for the store's repository (merged separately)."""

    def __init__(self) -> None:
        self.seen: list[IncidentFilter] = []

    def list_incidents(self, filters: IncidentFilter) -> list[dict[str, Any]]:
        self.seen.append(filters)
        rows = [{"id": 1, "verdict": "zone_split_blocked"}, {"id": 2, "verdict": "healthy"}]
        return [r for r in rows if filters.verdict in (None, r["verdict"])][: filters.limit]

    def get_incident(self, incident_id: int) -> dict[str, Any] | None:
        return {"id": 1, "timeline": []} if incident_id == 1 else None


class World:
    def __init__(self) -> None:
        self.ready = {"caches": False, "database": True}
        self.handed: list[tuple[str, list[JobKey]]] = []
        self.accepting = True
        self.metrics = AgentMetrics()
        self.incidents = Incidents()

    def on_alert(self, alert: Alert, jobs: list[JobKey]) -> bool:
        if not self.accepting:
            return False
        self.handed.append((alert.name, jobs))
        return True


def _app(world: World, token: str | None) -> Any:
    receiver = AlertReceiver(
        jobs_named=lambda ns, n: [RESNET] if (ns, n) == ("ml", "resnet") else [],
        job_of_pod=lambda ns, p: RESNET if p.startswith("resnet-") else None,
        ready=lambda: world.ready["caches"],
        on_alert=world.on_alert,
        on_outcome=lambda o: world.metrics.alerts.labels(outcome=o).inc(),
    )
    return build_app(
        metrics=world.metrics,
        readiness=lambda: dict(world.ready),
        alerts=receiver,
        incidents=world.incidents,
        api_token=token,
    )


@pytest.fixture
def served() -> Iterator[tuple[World, httpx.Client]]:
    world = World()
    server = HttpServer(_app(world, None), host="127.0.0.1", port=0).start()
    try:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            yield world, client
    finally:
        server.stop()


def _hook(*alerts: dict[str, Any]) -> bytes:
    return orjson.dumps({"version": "4", "status": "firing", "alerts": list(alerts)})


ALERT = {"labels": {"alertname": "TrainingJobGPUUtilizationDrop", "namespace": "ml", "created_by_name": "resnet"}, "startsAt": "t1", "fingerprint": "f1"}


def test_health_readiness_and_metrics(served: tuple[World, httpx.Client]) -> None:
    world, client = served
    assert client.get("/healthz").json() == {"status": "ok"}
    not_ready = client.get("/readyz")
    assert not_ready.status_code == 503
    assert not_ready.json()["checks"] == {"caches": False, "database": True}
    world.ready["caches"] = True
    assert client.get("/readyz").status_code == 200
    world.metrics.set_leader(True)
    text = client.get("/metrics").text
    assert "zonemedic_leader 1.0" in text
    assert "zonemedic_detection_latency_seconds_bucket" in text


def test_alertmanager_status_codes(served: tuple[World, httpx.Client]) -> None:
    world, client = served
    bad = client.post("/alertmanager", content=b"{nope")
    assert bad.status_code == 400 and "not JSON" in bad.json()["error"]
    assert client.post("/alertmanager", content=_hook(ALERT)).status_code == 503  # not synced: retry
    world.ready["caches"] = True
    ok = client.post("/alertmanager", content=_hook(ALERT, {"labels": {"alertname": "X", "namespace": "ml", "pod": "resnet-worker-0"}}, {"labels": {"alertname": "Y"}}))
    assert ok.status_code == 200
    assert ok.json() == {"accepted": 2, "duplicates": 0, "unmapped": 1, "jobs": [str(RESNET)]}
    again = client.post("/alertmanager", content=_hook(ALERT))
    assert again.json()["duplicates"] == 1
    assert [name for name, _ in world.handed] == ["TrainingJobGPUUtilizationDrop", "X", "Y"]
    world.accepting = False
    fresh = dict(ALERT, fingerprint="f2")
    assert client.post("/alertmanager", content=_hook(fresh)).status_code == 503
    world.accepting = True
    assert client.post("/alertmanager", content=_hook(fresh)).json()["accepted"] == 1  # not lost
    assert 'zonemedic_alertmanager_alerts_total{outcome="duplicate"} 1.0' in client.get("/metrics").text


def test_incidents_api_on_loopback_without_token(served: tuple[World, httpx.Client]) -> None:
    world, client = served
    listed = client.get("/api/incidents", params={"verdict": "healthy", "since": "7d", "job": "ml/resnet", "limit": "5"})
    assert listed.status_code == 200
    assert listed.json() == {"incidents": [{"id": 2, "verdict": "healthy"}]}
    assert world.incidents.seen[-1] == IncidentFilter(job_namespace="ml", job_name="resnet", verdict="healthy", since=timedelta(days=7), limit=5)
    assert client.get("/api/incidents/1").json() == {"id": 1, "timeline": []}
    assert client.get("/api/incidents/9").status_code == 404
    assert client.get("/api/incidents/x").status_code == 400
    bad = client.get("/api/incidents", params={"since": "soon"})
    assert bad.status_code == 400 and "since" in bad.json()["error"]


def _asgi_get(app: Any, path: str, *, client: tuple[str, int], headers: dict[str, str] | None = None) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, client=client)
        async with httpx.AsyncClient(transport=transport, base_url="http://agent") as c:
            return await c.get(path, headers=headers)

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("token", "peer", "headers", "status"),
    [
        (None, "127.0.0.1", None, 200),
        (None, "10.1.2.3", None, 403),  # no token configured: never open to the network
        ("s3cret", "10.1.2.3", None, 401),
        ("s3cret", "10.1.2.3", {"Authorization": "Bearer nope"}, 401),
        ("s3cret", "10.1.2.3", {"Authorization": "Bearer s3cret"}, 200),
        ("s3cret", "127.0.0.1", None, 401),  # a token, once set, applies to everyone
    ],
)
def test_incidents_api_auth(token: str | None, peer: str, headers: dict[str, str] | None, status: int) -> None:
    response = _asgi_get(_app(World(), token), "/api/incidents", client=(peer, 5000), headers=headers)
    assert response.status_code == status


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"job": "resnet"}, "job: expected NAMESPACE/NAME"),
        ({"limit": "0"}, "limit: expected an integer"),
        ({"limit": "abc"}, "limit: expected an integer"),
        ({"colour": "red"}, "unknown query parameter 'colour'"),
    ],
)
def test_bad_filters(params: dict[str, str], message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_filters(params)
