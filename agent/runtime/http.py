"""The agent's one ASGI app (Starlette on uvicorn): health, readiness, metrics, webhook, incidents API.

Built by the composition root with `build_app(...)`; every dependency comes in as an argument:

- `GET /healthz`: the process answers (200 always);
- `GET /readyz`: 200 when every readiness check passes (caches synced, database reachable...),
  else 503 with the failing checks named;
- `GET /metrics`: the agent's private prometheus_client registry;
- `POST /alertmanager`: the Alertmanager webhook (`AlertReceiver` decides the status code);
- `GET /api/incidents` (filters `job=NS/NAME`, `namespace`, `status`, `verdict`, `since=7d`,
  `limit`) and `GET /api/incidents/{id}`: bearer-token auth when `api_token` is set; without a
  token the API answers loopback clients only (403 otherwise), so it is off by default on loopback
  and never open to the network by accident;
- `POST /api/incidents/{id}/decision` (`agent.runtime.decision_api`): approve, reject or snooze
  through the one decision function. The route exists only when `api_token` is set (and a decider
  is given): a bearer token, compared in constant time, is required (401 without it); 400 names a
  bad field, 404 no such incident, 409 already decided / expired / no longer current (naming who
  and when), 200 with the result when this request recorded the decision.

Extra routes (the Slack events endpoint of the chat layer) are mounted with `extra_routes`. Handlers
do no blocking work on the event loop: queries and webhook handling run in a thread pool.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from agent.errors import ConfigError, InputError, UnavailableError
from agent.model.lifecycle import to_jsonable
from agent.remediation.decision import DecisionRequest, DecisionResult
from agent.runtime import decision_api
from agent.runtime.alerts import AlertReceiver
from agent.runtime.metrics import CONTENT_TYPE, AgentMetrics
from agent.settings import parse_duration

LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})
MAX_LIMIT = 1000


@dataclass(frozen=True)
class IncidentFilter:
    job_namespace: str | None = None
    job_name: str | None = None
    namespace: str | None = None
    status: str | None = None
    verdict: str | None = None
    since: timedelta | None = None
    limit: int = 100


class IncidentQueries(Protocol):
    """What the incidents API reads (the store's repository, adapted by the composition root)."""

    def list_incidents(self, filters: IncidentFilter) -> list[dict[str, Any]]: ...

    def get_incident(self, incident_id: int) -> dict[str, Any] | None: ...


class IncidentDecisions(Protocol):
    """What the decision API calls (the one decision function over the store, with `now`)."""

    def decide(self, request: DecisionRequest) -> DecisionResult: ...


def parse_filters(params: dict[str, str]) -> IncidentFilter:
    """Query parameters -> filters; InputError names the bad parameter."""
    known = {"job", "namespace", "status", "verdict", "since", "limit"}
    for key in params:
        if key not in known:
            raise InputError(f"unknown query parameter {key!r} (known: {', '.join(sorted(known))})")
    job_ns = job_name = None
    if params.get("job"):
        job_ns, sep, job_name = params["job"].partition("/")
        if not sep or not job_ns or not job_name:
            raise InputError(f"job: expected NAMESPACE/NAME, got {params['job']!r}")
    since = None
    if params.get("since"):
        try:
            since = parse_duration(params["since"], key="since")
        except ConfigError as exc:
            raise InputError(str(exc)) from exc
    limit = 100
    if params.get("limit"):
        raw = params["limit"]
        if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
            raise InputError(f"limit: expected an integer 1-{MAX_LIMIT}, got {raw!r}")
        limit = int(raw)
    return IncidentFilter(
        job_namespace=job_ns,
        job_name=job_name,
        namespace=params.get("namespace") or None,
        status=params.get("status") or None,
        verdict=params.get("verdict") or None,
        since=since,
        limit=limit,
    )


def _error(status: int, message: str, **headers: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers or None)


def _decision_route(
    decisions: IncidentDecisions, authorized: Callable[[Request], JSONResponse | None]
) -> Route:
    async def decide(request: Request) -> Response:
        denied = authorized(request)
        if denied is not None:
            return denied
        body = await request.body()
        try:
            wanted = decision_api.parse_decision(request.path_params["incident_id"], body)
        except InputError as exc:
            return _error(400, str(exc))
        try:
            result = await run_in_threadpool(decisions.decide, wanted)
        except InputError as exc:
            return _error(400, str(exc))
        except UnavailableError as exc:
            return _error(503, str(exc))
        status = decision_api.status_code(result)
        payload: dict[str, Any] = to_jsonable(result)
        if status != 200:
            payload["error"] = result.message
        return JSONResponse(payload, status_code=status)

    return Route("/api/incidents/{incident_id}/decision", decide, methods=["POST"])


def build_app(
    *,
    metrics: AgentMetrics,
    readiness: Callable[[], dict[str, bool]],
    alerts: AlertReceiver | None = None,
    incidents: IncidentQueries | None = None,
    api_token: str | None = None,
    decisions: IncidentDecisions | None = None,
    extra_routes: Sequence[BaseRoute] = (),
) -> Starlette:
    def authorized(request: Request) -> JSONResponse | None:
        if api_token is None:
            host = request.client.host if request.client else ""
            if host in LOOPBACK:
                return None
            return _error(403, "the incidents API needs http.api_token_file off loopback")
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode(), api_token.encode()
        ):
            return _error(401, "missing or wrong bearer token", **{"WWW-Authenticate": "Bearer"})
        return None

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        checks = await run_in_threadpool(readiness)
        ready = all(checks.values())
        return JSONResponse(
            {"ready": ready, "checks": checks}, status_code=200 if ready else 503
        )

    async def metrics_endpoint(request: Request) -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE)

    async def alertmanager(request: Request) -> Response:
        if alerts is None:
            return _error(503, "alert handling is not configured")
        body = await request.body()
        outcome = await run_in_threadpool(alerts.handle, body)
        return JSONResponse(outcome.body, status_code=outcome.status)

    async def list_incidents(request: Request) -> Response:
        denied = authorized(request)
        if denied is not None:
            return denied
        if incidents is None:
            return _error(503, "the incident store is not available")
        try:
            filters = parse_filters(dict(request.query_params))
        except InputError as exc:
            return _error(400, str(exc))
        try:
            rows = await run_in_threadpool(incidents.list_incidents, filters)
        except InputError as exc:
            return _error(400, str(exc))
        except UnavailableError as exc:
            return _error(503, str(exc))
        return JSONResponse({"incidents": rows})

    async def get_incident(request: Request) -> Response:
        denied = authorized(request)
        if denied is not None:
            return denied
        if incidents is None:
            return _error(503, "the incident store is not available")
        raw = request.path_params["incident_id"]
        if not raw.isdigit():
            return _error(400, f"incident id must be a number, got {raw!r}")
        try:
            found = await run_in_threadpool(incidents.get_incident, int(raw))
        except UnavailableError as exc:
            return _error(503, str(exc))
        if found is None:
            return _error(404, f"no incident {raw}")
        return JSONResponse(found)

    routes: list[BaseRoute] = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics_endpoint, methods=["GET"]),
        Route("/alertmanager", alertmanager, methods=["POST"]),
        Route("/api/incidents", list_incidents, methods=["GET"]),
        Route("/api/incidents/{incident_id}", get_incident, methods=["GET"]),
    ]
    if api_token is not None and decisions is not None:
        routes.append(_decision_route(decisions, authorized))
    routes.extend(extra_routes)
    return Starlette(routes=routes)
