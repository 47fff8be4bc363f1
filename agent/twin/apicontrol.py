"""The twin-only control endpoints under /twin/: request accounting and injected faults.

GET /twin/stats (requests per verb and resource, objects, resourceVersion, open watches, pending
failures, armed refusals, latency), POST /twin/stats/reset, POST /twin/faults/{fail,latency,
refuse,close-watches,expire-history} and DELETE /twin/faults. Used by the HTTP handler (apihandler.py) for tests and
benchmarks; a real API server has none of these. It does not authenticate (the twin's /twin/
endpoints are open, on 127.0.0.1 only).
"""

from __future__ import annotations

from typing import Any

from agent.twin.apierror import ApiError, bad_request
from agent.twin.apistate import ApiState
from agent.twin.faults import RefusalKind


def control(api: ApiState, method: str, parts: list[str], body: Any) -> dict[str, Any]:
    """The JSON answer to one /twin/ request (`parts` after "twin"); 404 for an unknown one."""
    body = body or {}
    if method == "GET" and parts == ["stats"]:
        return {
            "requests": api.accounting.snapshot(),
            "total": api.accounting.total(),
            "objects": api.store.counts(),
            "resourceVersion": api.store.resource_version,
            "watches": api.watch_count(),
            "pendingFailures": api.faults.pending(),
            "refusals": api.faults.refusals(),
            "latencySeconds": api.faults.latency_seconds,
        }
    if method == "POST" and parts == ["stats", "reset"]:
        api.accounting.reset()
        return {"reset": True}
    if method == "POST" and parts == ["faults", "fail"]:
        try:
            api.faults.fail(
                int(body.get("count", 1)),
                code=int(body.get("code", 500)),
                retry_after=body.get("retryAfter"),
                verb=body.get("verb"),
                resource=body.get("resource"),
            )
        except (TypeError, ValueError) as exc:
            raise bad_request(str(exc)) from exc
        return {"pendingFailures": api.faults.pending()}
    if method == "POST" and parts == ["faults", "refuse"]:
        dry_run = body.get("dryRun")
        count = body.get("count")
        try:
            if dry_run is not None and not isinstance(dry_run, bool):
                raise ValueError(f"dryRun must be true, false or absent, not {dry_run!r}")
            api.faults.refuse(
                verb=str(body.get("verb", "create")),
                resource=str(body["resource"]),
                kind=RefusalKind(str(body.get("kind", RefusalKind.WEBHOOK.value))),
                source=body.get("source"),
                message=str(body.get("message", "the request does not meet the cluster's policy")),
                count=None if count is None else int(count),
                name=body.get("name"),
                dry_run=dry_run,
            )
        except KeyError as exc:
            raise bad_request(f"missing key {exc.args[0]!r}") from exc
        except (TypeError, ValueError) as exc:
            raise bad_request(str(exc)) from exc
        return {"refusals": api.faults.refusals()}
    if method == "POST" and parts == ["faults", "latency"]:
        try:
            api.faults.set_latency(float(body.get("seconds", 0)))
        except (TypeError, ValueError) as exc:
            raise bad_request(str(exc)) from exc
        return {"latencySeconds": api.faults.latency_seconds}
    if method == "POST" and parts == ["faults", "close-watches"]:
        return {"closed": api.close_watches()}
    if method == "POST" and parts == ["faults", "expire-history"]:
        return {"compactedAt": api.expire_history()}
    if method == "DELETE" and parts == ["faults"]:
        api.faults.clear()
        return {"cleared": True}
    raise ApiError(404, "NotFound", f"no twin endpoint {method} /twin/{'/'.join(parts)}")
