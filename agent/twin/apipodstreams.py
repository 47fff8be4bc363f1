"""The pods' streaming subresources of the twin's API: `log`, and `exec`, `attach`, `portforward`.

A real API server proxies these to the kubelet of the pod's node. The twin's kubelets are
simulated, so `pods/{name}/log` is written from the pod object and the training model
(podlogs.py: what the simulated workload would print: connection attempts, rendezvous, training
progress), plain text, streamed with `follow=true` until the container stops, the client goes away
or the server stops. `exec`, `attach` and `portforward` need a process and a connection to it,
which the twin does not have: they answer what a real API server answers when it cannot reach the
kubelet (500 InternalError, `error dialing backend: ...`) with a message that says the twin does
not serve them, after the checks a real server makes first (404 for a missing pod, 400 for a pod
with no node, or a completed one for exec and attach). With no training model (the bare
`twin apiserver`, which runs no kubelets) `log` answers the same dial error.

Used by apiverbs.py (the RBAC check and counting happen there: `get` for log, `create` for the
others, as a v1.32 server authorizes a WebSocket upgrade). It does not write objects.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from agent.twin.apierror import ApiError, bad_request
from agent.twin.apiexchange import Exchange
from agent.twin.apiquery import Query
from agent.twin.apistate import ApiState, PodActivitySource
from agent.twin.podlogs import (
    LogLine,
    LogOptions,
    container_of,
    current_lines,
    previous_lines,
    render,
    select,
)
from agent.twin.resources import lookup

PODS = lookup("pods")
STREAMING = frozenset({"log", "exec", "attach", "portforward"})
FOLLOW_POLL = 0.5  # seconds between looks at a followed container
_STREAMS = threading.Lock()  # guards ApiState.log_streams
_WHAT = {"exec": "exec (running a command in a container)",
         "attach": "attach (a container's standard streams)",
         "portforward": "port-forward (a connection to a pod's port)",
         "log": "container logs"}


def verb_for(subresource: str) -> str:
    """The RBAC verb: `get` for log, `create` for exec, attach and portforward (whether the
    client upgrades with a GET, a WebSocket, or a POST, SPDY)."""
    return "get" if subresource == "log" else "create"


def _no_backend(subresource: str, node: str) -> ApiError:
    return ApiError(
        500, "InternalError",
        f"error dialing backend: the twin does not serve {_WHAT[subresource]}: the kubelet of "
        f"node {node} is simulated and runs no container processes"
        + ("" if subresource == "log" else " (kubectl logs works)"),
    )


def serve_pod_stream(
    api: ApiState,
    ex: Exchange,
    *,
    namespace: str,
    name: str,
    subresource: str,
    method: str,
    query: Query,
) -> None:
    if subresource == "log" and method != "GET":
        raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the "
                                                "requested resource")
    if subresource != "log" and method not in ("GET", "POST"):
        raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the "
                                                "requested resource")
    pod = api.store.get(PODS, name, namespace=namespace)  # 404 pods "name" not found
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    if subresource == "log":
        options = LogOptions.from_query(query)
        container = container_of(pod, options.container)
        if not node:  # a real server answers an unscheduled pod's log with an empty body
            ex.send(200, b"", content_type="text/plain")
            return
        if api.pod_activity is None:
            raise _no_backend("log", node)
        _serve_log(api, ex, pod, container=container, options=options, source=api.pod_activity)
        return
    if not node:
        raise bad_request(f"pod {name} does not have a host assigned")
    phase = (pod.get("status") or {}).get("phase")
    if subresource in ("exec", "attach") and phase in ("Succeeded", "Failed"):
        verb = "exec into" if subresource == "exec" else "attach to"
        raise bad_request(f"cannot {verb} a container in a completed pod; current phase is {phase}")
    raise _no_backend(subresource, node)


def _generation(pod: Mapping[str, Any], container: str) -> tuple[Any, ...]:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == container:
            state = cs.get("state") or {}
            run = state.get("running") or state.get("terminated") or {}
            return (cs.get("restartCount"), run.get("startedAt"), "terminated" in state)
    return ()


def _lines(pod: Mapping[str, Any], container: str, options: LogOptions,
           source: PodActivitySource, now: float) -> list[LogLine]:
    activity = source.activity(pod)
    if options.previous:
        return previous_lines(pod, container, activity)
    return current_lines(pod, container, activity, now=now)


def _serve_log(api: ApiState, ex: Exchange, pod: Mapping[str, Any], *, container: str,
               options: LogOptions, source: PodActivitySource) -> None:
    now = api.clock()
    lines = select(_lines(pod, container, options, source, now), options, now=now)
    if not options.follow or options.previous:
        ex.send(200, render(lines, options), content_type="text/plain")
        return
    meta = pod.get("metadata") or {}
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    generation = _generation(pod, container)
    ex.start_stream(content_type="text/plain")
    with _STREAMS:
        api.log_streams += 1
    try:
        _follow(api, ex, lines, name=name, namespace=namespace, container=container,
                generation=generation, options=options, source=source)
    finally:
        with _STREAMS:
            api.log_streams -= 1
    ex.end_stream()


def _follow(api: ApiState, ex: Exchange, lines: list[LogLine], *, name: str, namespace: str,
            container: str, generation: tuple[Any, ...], options: LogOptions,
            source: PodActivitySource) -> None:
    """Send `lines`, then every new line, until the container exits or restarts, the pod goes,
    the client goes away, the byte limit is reached or the server stops."""
    budget = options.limit_bytes
    sent = {(round(line.at, 2), line.text) for line in lines}
    last = max((line.at for line in lines), default=0.0)
    pending = lines
    while True:
        data = render(pending, LogOptions(timestamps=options.timestamps, limit_bytes=budget))
        if data:
            ex.chunk(data)
        if budget is not None:
            budget -= len(data)
            if budget <= 0:
                break
        if generation and generation[2]:  # the container exited: its log is complete
            break
        time.sleep(FOLLOW_POLL)
        if api.stopping or ex.client_gone():
            break
        try:
            pod = api.store.get(PODS, name, namespace=namespace)
            if _generation(pod, container) != generation:
                generation = _generation(pod, container)
                if not generation or not generation[2]:
                    break  # restarted or gone: a new container has a new log
            fresh = _lines(pod, container, options, source, api.clock())
        except ApiError:
            break
        pending = [line for line in fresh
                   if line.at > last and (round(line.at, 2), line.text) not in sent]
        sent.update((round(line.at, 2), line.text) for line in pending)
        last = max([last, *(line.at for line in pending)])
