"""Server-side printing: the `meta.k8s.io/v1 Table` that `kubectl get` asks for.

apiserver.py calls `table(rt, objects, now=...)` when a request's Accept header asks for
`as=Table`; kubectl then prints the columns as a real cluster would show them (pods: READY,
STATUS, RESTARTS, AGE; custom resources: their printer columns and AGE). Pure: objects in,
a dict out.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Iterable, Mapping
from typing import Any

from agent.twin.resources import ResourceType

Obj = Mapping[str, Any]


def human_age(seconds: float) -> str:
    """Kubernetes' HumanDuration, short form: 45s, 5m, 3h, 2d."""
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    if s < 3600 * 2:
        m = s // 60
        return f"{m}m{s % 60}s" if m < 10 and s % 60 else f"{m}m"
    if s < 86400 * 2:
        h = s // 3600
        return f"{h}h{(s % 3600) // 60}m" if h < 8 and (s % 3600) // 60 else f"{h}h"
    return f"{s // 86400}d"


def _age(obj: Obj, now: float) -> str:
    stamp = (obj.get("metadata") or {}).get("creationTimestamp")
    if not stamp:
        return "<unknown>"
    try:
        created = calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return "<unknown>"
    return human_age(now - created)


def _path(obj: Obj, path: str) -> Any:
    node: Any = obj
    for raw_step in path.split("."):
        index = None
        step = raw_step
        if raw_step.endswith("]") and "[" in raw_step:
            step, _, raw = raw_step[:-1].partition("[")
            index = int(raw)
        node = node.get(step) if isinstance(node, Mapping) else None
        if index is not None:
            node = node[index] if isinstance(node, list) and node else None
    return node


def _pod_cells(pod: Obj) -> list[Any]:
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount", 0)) for c in statuses)
    phase = status.get("reason") or status.get("phase") or "Pending"
    for cs in statuses:  # kubectl shows a container's waiting/terminated reason (CrashLoopBackOff)
        state = cs.get("state") or {}
        reason = (state.get("waiting") or {}).get("reason") or (state.get("terminated") or {}).get(
            "reason"
        )
        if reason:
            phase = reason
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        phase = "Terminating"
    return [
        f"{ready}/{len(spec.get('containers') or [])}",
        phase,
        restarts,
    ]


def _node_cells(node: Obj) -> list[Any]:
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    state = "Ready" if ready and ready.get("status") == "True" else "NotReady"
    if (node.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = (node.get("metadata") or {}).get("labels") or {}
    roles = sorted(k.rsplit("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/"))
    return [state, ",".join(roles) or "<none>"]


def _after_age_cells(rt: ResourceType, obj: Obj) -> list[Any]:
    """Default columns a real cluster prints after AGE (nodes: VERSION)."""
    if rt.key == ("", "v1", "nodes"):
        return [((obj.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", "")]
    return []


_AFTER_AGE_COLUMNS = {("", "v1", "nodes"): ["Version"]}


def _columns(rt: ResourceType) -> list[tuple[str, str]]:
    if rt.key == ("", "v1", "pods"):
        return [("Ready", "string"), ("Status", "string"), ("Restarts", "integer")]
    if rt.key == ("", "v1", "nodes"):
        return [("Status", "string"), ("Roles", "string")]
    return [(header.title(), "string") for header, _ in rt.printer_columns]


def _cells(rt: ResourceType, obj: Obj) -> list[Any]:
    if rt.key == ("", "v1", "pods"):
        return _pod_cells(obj)
    if rt.key == ("", "v1", "nodes"):
        return _node_cells(obj)
    out = []
    for _, path in rt.printer_columns:
        value = _path(obj, path)
        out.append("" if value is None else value)
    return out


def _wide_cells(rt: ResourceType, obj: Obj) -> list[Any]:
    """Columns kubectl shows only with -o wide (priority 1), after AGE, as for a real cluster."""
    if rt.key == ("", "v1", "pods"):
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        return [
            status.get("podIP") or "<none>",
            spec.get("nodeName") or "<none>",
            status.get("nominatedNodeName") or "<none>",
            "<none>",
        ]
    return []


_WIDE_COLUMNS = {("", "v1", "pods"): ["IP", "Node", "Nominated Node", "Readiness Gates"]}


def _column(name: str, kind: str, description: str = "", *, priority: int = 0) -> dict[str, Any]:
    return {
        "name": name,
        "type": kind,
        "format": "name" if name == "Name" else "",
        "description": description,
        "priority": priority,
    }


def table(
    rt: ResourceType,
    objects: Iterable[Obj],
    *,
    now: float,
    resource_version: str = "",
    continue_token: str | None = None,
) -> dict[str, Any]:
    """A Table listing `objects`; each row carries the full object for kubectl's -L/--show-labels."""
    columns = [_column("Name", "string", "Name must be unique within a namespace.")]
    columns += [_column(name, kind) for name, kind in _columns(rt)]
    columns.append(_column("Age", "string", "CreationTimestamp"))
    columns += [_column(name, "string") for name in _AFTER_AGE_COLUMNS.get(rt.key, [])]
    columns += [_column(name, "string", priority=1) for name in _WIDE_COLUMNS.get(rt.key, [])]
    rows = []
    for obj in objects:
        name = (obj.get("metadata") or {}).get("name", "")
        cells = [
            name,
            *_cells(rt, obj),
            _age(obj, now),
            *_after_age_cells(rt, obj),
            *_wide_cells(rt, obj),
        ]
        rows.append({"cells": cells, "object": obj})
    metadata: dict[str, Any] = {"resourceVersion": resource_version}
    if continue_token:
        metadata["continue"] = continue_token
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": columns,
        "rows": rows,
    }
