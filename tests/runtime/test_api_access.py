"""Every route of the HTTP API (`/api/...`) is behind the API token: read from the app's own route
table, so a route added later is checked without being listed here."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime

import httpx
from starlette.routing import Route

from agent.approval.approvers import Authority
from agent.runtime.http import build_app
from agent.runtime.incidents import StoreIncidents
from agent.runtime.metrics import AgentMetrics
from agent.store.repository import IncidentStore

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
TOKEN = "s3cret-token"


def test_every_api_route_refuses_a_request_without_the_token(store: IncidentStore) -> None:
    app = build_app(metrics=AgentMetrics(), readiness=lambda: {}, api_token=TOKEN,
                    incidents=StoreIncidents(store, cluster="prod", now=lambda: NOW,
                                             authority=Authority()))  # fmt: skip
    routes = [(r.path, sorted(r.methods or ())) for r in app.routes
              if isinstance(r, Route) and r.path.startswith("/api/")]  # fmt: skip
    assert {"/api/incidents", "/api/incidents/{incident_id}", "/api/admissions",
            "/api/explain", "/api/whatif"} <= {path for path, _ in routes}  # fmt: skip

    async def status(method: str, path: str, headers: dict[str, str]) -> int:
        transport = httpx.ASGITransport(app=app, client=("10.1.2.3", 5000))
        async with httpx.AsyncClient(transport=transport, base_url="http://agent") as c:
            return (await c.request(method, path, headers=headers)).status_code

    for path, methods in routes:
        concrete = re.sub(r"\{[^}]+\}", "1", path)
        for method in (m for m in methods if m != "HEAD"):
            for headers in ({}, {"Authorization": f"Bearer {TOKEN}x"}):
                assert asyncio.run(status(method, concrete, headers)) == 401, (method, path, headers)
