"""The agent's one ASGI app (Starlette on uvicorn): health, readiness, metrics, webhook, incidents API.

Built by the composition root with `build_app(...)`; every dependency comes in as an argument:

- `GET /healthz`: the process answers (200 always);
- `GET /readyz`: 200 when every readiness check passes (caches synced, database reachable...),
  else 503 with the failing checks named;
- `GET /metrics`: the agent's private prometheus_client registry;
- `POST /alertmanager`: the Alertmanager webhook (`AlertReceiver` decides the status code);
  with `webhook_credentials` a request without them (Alertmanager's bearer token or basic auth)
  is 401 with `WWW-Authenticate` before its body is read;
- `GET /api/incidents` (filters `job=NS/NAME`, `namespace`, `status`, `verdict`, `since=7d`,
  `limit`), `GET /api/incidents/{id}` and `GET /api/incidents/{id}/patch?format=manifest|kustomize|
  json6902` (the fix handed over to its source, 404 without one): bearer-token auth when `api_token` is set; without a
  token the API answers loopback clients only (403 otherwise), so it is off by default on loopback
  and never open to the network by accident;
- `GET /api/explain?from=NS/POD&to=NS/POD&port=PORT[/PROTO]` (or `from=NS&from_labels=K=V,...`,
  `to_labels`): why the network policies allow or deny that flow, the JSON of `zonemedic explain`
  (`agent.runtime.explainer`); read-only, behind the same check as the incidents API (bearer
  token, or loopback without one); 400 names a bad parameter or an unknown pod, 503 before the
  caches are synced or without an explainer;
- `POST /api/whatif` (body: policy objects to apply, YAML or JSON, or `{"delete": "KIND/NS/NAME"}`,
  at most `agent.runtime.whatif.MAX_BODY` bytes): the blast radius of that change over every job,
  the JSON of `zonemedic whatif --output json` (`agent.runtime.whatif`); read-only (it changes
  nothing in the cluster), behind the same check as the incidents API, checked before the body is
  read; 400 names what is wrong with the body, 413 a body too large, 503 before the caches are
  synced or without a what-if;
- `GET /api/admissions` (filters `since=7d`, `outcome`, `namespace`, `limit`): the admission
  webhook's recorded decisions, newest first, and the week's summary (jobs placed at admission,
  restarts avoided): the JSON of `zonemedic admissions --json`; behind the same check;
- `POST /api/incidents/{id}/decision` (`agent.runtime.decision_http`): approve, reject or snooze
  through the one decision function. The route exists only when `api_token` is set (and a decider
  is given): a bearer token, compared in constant time, is required (401 without it); 400 names a
  bad field, 404 no such incident, 409 already decided / expired / no longer current (naming who
  and when), 200 with the result when this request recorded the decision.

Extra routes (the Slack events endpoint of the chat layer) are mounted with `extra_routes`. Write
routes (`write_routes`: API endpoints that change something) exist only when `api_token` is set and
each needs the bearer token (constant-time comparison); without a token they are not mounted.
Handlers do no blocking work on the event loop: queries and webhook handling run in a thread pool.

Errors never carry a stack trace: an `InputError` escaping a handler is a 400 with its one-line
message (413 for `BodyTooLargeError`: `read_body` refuses a body past the endpoint's limit from its
`Content-Length`, or as soon as a chunked body passes it), `UnavailableError` a 503, and anything
else a 500 saying "internal error" while the traceback goes to the agent's log only.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from agent.approval.decision import DecisionRequest, DecisionResult
from agent.errors import InputError, UnavailableError
from agent.model.incident import parse_incident_id
from agent.model.lifecycle import to_jsonable
from agent.parsing.bounded_body import BodyTooLargeError, read_bounded
from agent.parsing.numbers import parse_duration, parse_int
from agent.policy.explanation import ExplainQuery
from agent.runtime import decision_http
from agent.runtime.alerts import AlertReceiver
from agent.runtime.explainer import parse_params
from agent.runtime.limits import ReadDeadlineError
from agent.runtime.metrics import CONTENT_TYPE, AgentMetrics
from agent.runtime.webhook_credentials import WebhookCredentials
from agent.runtime.whatif import MAX_BODY as WHATIF_MAX_BODY
from agent.runtime.whatif import Change, parse_change
from agent.sources.alertmanager import MAX_BODY

log = logging.getLogger(__name__)

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


@dataclass(frozen=True)
class AdmissionFilter:
    since: timedelta | None = None
    outcome: str | None = None
    namespace: str | None = None
    limit: int = 100


def parse_admission_filters(params: dict[str, str]) -> AdmissionFilter:
    """`GET /api/admissions` query parameters -> filters; InputError names the bad parameter."""
    known = {"since", "outcome", "namespace", "limit"}
    for key in params:
        if key not in known:
            raise InputError(f"unknown query parameter {key!r} (known: {', '.join(sorted(known))})")
    since = parse_duration(params["since"], field="since") if params.get("since") else None
    limit = (parse_int(params["limit"], field="limit", minimum=1, maximum=MAX_LIMIT)
             if params.get("limit") else 100)  # fmt: skip
    return AdmissionFilter(since=since, outcome=params.get("outcome") or None,
                           namespace=params.get("namespace") or None, limit=limit)  # fmt: skip


class IncidentQueries(Protocol):
    """What the incidents API reads (the store's repository, adapted by the composition root)."""

    def list_incidents(self, filters: IncidentFilter) -> list[dict[str, Any]]: ...

    def get_incident(self, incident_id: int) -> dict[str, Any] | None: ...

    def list_admissions(self, filters: AdmissionFilter) -> dict[str, Any]: ...

    def incident_patch(self, incident_id: int, fmt: str) -> dict[str, Any] | None: ...


class Explainer(Protocol):
    """What `GET /api/explain` calls (`agent.runtime.explainer.LiveExplainer`)."""

    def explain(self, query: ExplainQuery) -> dict[str, Any]: ...


class WhatIf(Protocol):
    """What `POST /api/whatif` calls (`agent.runtime.whatif.LiveWhatIf`)."""

    def whatif(self, change: Change) -> dict[str, Any]: ...


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
        since = parse_duration(params["since"], field="since")
    limit = 100
    if params.get("limit"):
        limit = parse_int(params["limit"], field="limit", minimum=1, maximum=MAX_LIMIT)
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


async def read_body(request: Request, *, limit: int) -> bytes:
    """The request body, at most `limit` bytes (`agent.parsing.bounded_body`): a larger
    `Content-Length` is refused before anything is read, and a chunked (or lying) body is
    refused as soon as it passes the limit."""
    return await read_bounded(request.headers.get("content-length"), request.stream(),
                              limit=limit)


async def _client_error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, ReadDeadlineError):  # the body is half read: close the connection
        return _error(408, str(exc), Connection="close")
    status = 413 if isinstance(exc, BodyTooLargeError) else 400
    return _error(status, str(exc))


async def _unavailable(request: Request, exc: Exception) -> Response:
    return _error(503, str(exc))


async def _internal_error(request: Request, exc: Exception) -> Response:
    """Any other exception: logged with its traceback, answered without one."""
    log.error(
        "unhandled error in an HTTP handler",
        exc_info=exc,
        extra={"path": request.url.path, "method": request.method},
    )
    return _error(500, "internal error (logged by the agent)")


def _bearer_only(route: Route, authorized: Callable[[Request], JSONResponse | None]) -> Route:
    """`route` behind the bearer-token check (401 without the token)."""
    endpoint = route.endpoint

    async def guarded(request: Request) -> Response:
        denied = authorized(request)
        if denied is not None:
            return denied
        response: Response = await endpoint(request)
        return response

    return Route(route.path, guarded, methods=sorted(route.methods or ()), name=route.name)


def _decision_route(decisions: IncidentDecisions) -> Route:
    """`POST /api/incidents/{id}/decision`: a write route (mounted behind the bearer token)."""

    async def decide(request: Request) -> Response:
        body = await read_body(request, limit=decision_http.MAX_BODY)
        wanted = decision_http.parse_decision(request.path_params["incident_id"], body)
        result = await run_in_threadpool(decisions.decide, wanted)
        status = decision_http.status_code(result)
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
    write_routes: Sequence[Route] = (),
    extra_routes: Sequence[BaseRoute] = (),
    webhook_credentials: WebhookCredentials | None = None,
    explainer: Explainer | None = None,
    whatif: WhatIf | None = None,
) -> Starlette:
    """The app. `write_routes` (API endpoints that change something) are mounted only when
    `api_token` is set, each behind the bearer token; without a token they do not exist (404)."""
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
        # the collectors read the cache's counts under its lock: off the event loop
        return Response(await run_in_threadpool(metrics.exposition), media_type=CONTENT_TYPE)

    async def alertmanager(request: Request) -> Response:
        if webhook_credentials is not None and not webhook_credentials.allows(request.headers):
            return _error(401, "missing or wrong credentials for the Alertmanager webhook",
                          **{"WWW-Authenticate": webhook_credentials.challenge})
        if alerts is None:
            return _error(503, "alert handling is not configured")
        body = await read_body(request, limit=MAX_BODY)
        outcome = await run_in_threadpool(alerts.handle, body)
        return JSONResponse(outcome.body, status_code=outcome.status)

    def incident_read(
        read: Callable[[Request, IncidentQueries], Awaitable[Response]],
    ) -> Callable[[Request], Awaitable[Response]]:
        """A read of the incidents API: refused without the caller's right (`authorized`) or
        without a store (503); a bad parameter is answered 400 and a store that is away 503 by
        the app's exception handlers."""

        async def endpoint(request: Request) -> Response:
            denied = authorized(request)
            if denied is not None:
                return denied
            if incidents is None:
                return _error(503, "the incident store is not available")
            return await read(request, incidents)

        return endpoint

    @incident_read
    async def list_incidents(request: Request, store: IncidentQueries) -> Response:
        filters = parse_filters(dict(request.query_params))
        rows = await run_in_threadpool(store.list_incidents, filters)
        return JSONResponse({"incidents": rows})

    @incident_read
    async def get_incident(request: Request, store: IncidentQueries) -> Response:
        incident_id = parse_incident_id(request.path_params["incident_id"])
        found = await run_in_threadpool(store.get_incident, incident_id)
        if found is None:
            return _error(404, f"no incident {incident_id}")
        return JSONResponse(found)

    @incident_read
    async def list_admissions(request: Request, store: IncidentQueries) -> Response:
        filters = parse_admission_filters(dict(request.query_params))
        return JSONResponse(await run_in_threadpool(store.list_admissions, filters))

    @incident_read
    async def incident_patch(request: Request, store: IncidentQueries) -> Response:
        incident_id = parse_incident_id(request.path_params["incident_id"])
        fmt = request.query_params.get("format", "kustomize")
        found = await run_in_threadpool(store.incident_patch, incident_id, fmt)
        if found is None:
            return _error(404, f"incident {incident_id} has no fix to hand over")
        return JSONResponse(found)

    async def explain(request: Request) -> Response:
        denied = authorized(request)
        if denied is not None:
            return denied
        query = parse_params(dict(request.query_params))
        if explainer is None:
            return _error(503, "explanations are not available in this agent")
        return JSONResponse(await run_in_threadpool(explainer.explain, query))

    async def what_if(request: Request) -> Response:
        denied = authorized(request)
        if denied is not None:
            return denied
        if whatif is None:
            return _error(503, "what-if answers are not available in this agent")
        body = await read_body(request, limit=WHATIF_MAX_BODY)
        change = parse_change(body)
        return JSONResponse(await run_in_threadpool(whatif.whatif, change))

    routes: list[BaseRoute] = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics_endpoint, methods=["GET"]),
        Route("/alertmanager", alertmanager, methods=["POST"]),
        Route("/api/incidents", list_incidents, methods=["GET"]),
        Route("/api/incidents/{incident_id}", get_incident, methods=["GET"]),
        Route("/api/incidents/{incident_id}/patch", incident_patch, methods=["GET"]),
        Route("/api/explain", explain, methods=["GET"]),
        Route("/api/whatif", what_if, methods=["POST"]),
        Route("/api/admissions", list_admissions, methods=["GET"]),
    ]
    if api_token is not None:
        writes = [*write_routes]
        if decisions is not None:
            writes.append(_decision_route(decisions))
        routes.extend(_bearer_only(route, authorized) for route in writes)
    routes.extend(extra_routes)
    handlers: dict[Any, Callable[[Request, Exception], Any]] = {
        InputError: _client_error,
        UnavailableError: _unavailable,
        Exception: _internal_error,
    }
    return Starlette(routes=routes, exception_handlers=handlers, debug=False)
