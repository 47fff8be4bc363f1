"""Server-side printing: the `meta.k8s.io/v1 Table` that `kubectl get` asks for.

apiverbs.py and apiwatch.py call `table(rt, objects, now=...)` when a request's Accept header asks
for `as=Table`; kubectl then prints the columns a real v1.32 API server serves for the kind. Each
built-in kind has a `Printer`: its column definitions (name, type, priority 1 for the columns
only `-o wide` shows) and the function computing every cell of a row, NAME and AGE included.
As a real server does, every row carries every cell, the wide ones too, and kubectl hides the
priority-1 columns unless asked. The cells follow the upstream printers: pods READY STATUS
RESTARTS, nodes STATUS ROLES VERSION, deployments READY UP-TO-DATE AVAILABLE, jobs STATUS
COMPLETIONS DURATION, events LAST SEEN TYPE REASON OBJECT MESSAGE, and so on. A built-in kind
without a printer upstream (roles, cluster roles) gets the default table (NAME, CREATED AT); a
custom resource gets the columns its CRD declares (JSONPath, as the API server's table
convertor evaluates them), or NAME and AGE when it declares none. Ages and durations are Kubernetes'
HumanDuration. Pure: objects and the wall-clock time in, a dict out.
"""

from __future__ import annotations

import calendar
import functools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.twin import jsonpath
from agent.twin.jsonpath import JsonPath
from agent.twin.resources import AGE_COLUMN, PrinterColumn, ResourceType

Obj = Mapping[str, Any]
NODE_ROLE_PREFIX = "node-role.kubernetes.io/"
NODE_ROLE_LABEL = "kubernetes.io/role"


def human_duration(seconds: float) -> str:
    """Kubernetes' HumanDuration: 45s, 2m5s, 15m, 3h20m, 30h, 2d5h, 20d, 3y40d."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def _epoch(stamp: object) -> float | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return float(calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


def _since(stamp: object, now: float) -> str:
    """How long ago `stamp` (RFC 3339) was, or <unknown>."""
    when = _epoch(stamp)
    return "<unknown>" if when is None else human_duration(now - when)


def _m(obj: object, *path: str) -> Any:
    node: Any = obj
    for step in path:
        node = node.get(step) if isinstance(node, Mapping) else None
    return node


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _int(value: object, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _name(obj: Obj) -> str:
    return str(_m(obj, "metadata", "name") or "")


def _age(obj: Obj, now: float) -> str:
    return _since(_m(obj, "metadata", "creationTimestamp"), now)


def format_labels(labels: object) -> str:
    """`k=v,k2=v2` sorted by key, or <none> (labels.FormatLabels)."""
    if not isinstance(labels, Mapping) or not labels:
        return "<none>"
    return ",".join(f"{k}={labels[k]}" for k in sorted(labels))


def selector_string(selector: object) -> str:
    """A LabelSelector as kubectl writes it: `app=x,tier in (a,b),!gone`, requirements by key."""
    if not isinstance(selector, Mapping):
        return ""
    requirements: list[tuple[str, str]] = [
        (str(k), f"{k}={v}") for k, v in (_m(selector, "matchLabels") or {}).items()
    ]
    for expr in _list(selector.get("matchExpressions")):
        key, op = str(_m(expr, "key")), str(_m(expr, "operator"))
        values = ",".join(sorted(str(v) for v in _list(_m(expr, "values"))))
        text = {"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})",
                "Exists": key, "DoesNotExist": f"!{key}"}.get(op, f"{key} {op} ({values})")
        requirements.append((key, text))
    return ",".join(text for _, text in sorted(requirements))


def format_selector(selector: object) -> str:
    """metav1.FormatLabelSelector: the selector's string, or <none> when it selects by nothing."""
    return selector_string(selector) or "<none>"


def _containers(pod_spec: object) -> tuple[str, str]:
    containers = [c for c in _list(_m(pod_spec, "containers")) if isinstance(c, Mapping)]
    return (",".join(str(c.get("name", "")) for c in containers),
            ",".join(str(c.get("image", "")) for c in containers))


# --------------------------------------------------------------------------------------------
# one function per kind: every cell of a row, as the upstream printers compute them


def _pod_cells(pod: Obj, now: float) -> list[Any]:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    total = len(_list(spec.get("containers")))
    phase = str(status.get("phase") or "")
    reason = str(status.get("reason") or phase)
    for condition in _list(status.get("conditions")):
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"
    ready = restarts = 0
    last_restart: float | None = None
    running = False
    for cs in reversed(_list(status.get("containerStatuses"))):
        restarts += _int(cs.get("restartCount"))
        finished = _epoch(_m(cs, "lastState", "terminated", "finishedAt"))
        if finished is not None and (last_restart is None or finished > last_restart):
            last_restart = finished
        waiting, terminated = _m(cs, "state", "waiting"), _m(cs, "state", "terminated")
        if isinstance(waiting, Mapping) and waiting.get("reason"):
            reason = str(waiting["reason"])
        elif isinstance(terminated, Mapping) and terminated.get("reason"):
            reason = str(terminated["reason"])
        elif isinstance(terminated, Mapping):
            signal = _int(terminated.get("signal"))
            reason = f"Signal:{signal}" if signal else f"ExitCode:{_int(terminated.get('exitCode'))}"
        elif cs.get("ready") and isinstance(_m(cs, "state", "running"), Mapping):
            running = True
            ready += 1
    if reason == "Completed" and running:
        ready_condition = any(c.get("type") == "Ready" and c.get("status") == "True"
                              for c in _list(status.get("conditions")))
        reason = "Running" if ready_condition else "NotReady"
    if _m(pod, "metadata", "deletionTimestamp"):
        if status.get("reason") == "NodeLost":
            reason = "Unknown"
        elif phase not in ("Succeeded", "Failed"):
            reason = "Terminating"
    shown_restarts = str(restarts)
    if restarts and last_restart is not None:
        shown_restarts = f"{restarts} ({human_duration(now - last_restart)} ago)"
    ips = _list(status.get("podIPs"))
    ip = str(_m(ips[0], "ip") or "") if ips else ""
    gates = [str(_m(g, "conditionType")) for g in _list(spec.get("readinessGates"))]
    gate_text = "<none>"
    if gates:
        true = {c.get("type") for c in _list(status.get("conditions")) if c.get("status") == "True"}
        gate_text = f"{sum(1 for g in gates if g in true)}/{len(gates)}"
    return [_name(pod), f"{ready}/{total}", reason, shown_restarts, _age(pod, now),
            ip or "<none>", spec.get("nodeName") or "<none>",
            status.get("nominatedNodeName") or "<none>", gate_text]


def _node_cells(node: Obj, now: float) -> list[Any]:
    status = node.get("status") or {}
    ready = next((c for c in _list(status.get("conditions")) if c.get("type") == "Ready"), None)
    states = ["Unknown"] if ready is None else (
        ["Ready"] if ready.get("status") == "True" else ["NotReady"])
    if _m(node, "spec", "unschedulable"):
        states.append("SchedulingDisabled")
    labels = _m(node, "metadata", "labels") or {}
    roles = {k[len(NODE_ROLE_PREFIX):] for k in labels
             if k.startswith(NODE_ROLE_PREFIX) and len(k) > len(NODE_ROLE_PREFIX)}
    if labels.get(NODE_ROLE_LABEL):
        roles.add(str(labels[NODE_ROLE_LABEL]))
    info = status.get("nodeInfo") or {}

    def address(kind: str) -> str:
        found = (a.get("address") for a in _list(status.get("addresses")) if a.get("type") == kind)
        return str(next(found, None) or "<none>")

    return [_name(node), ",".join(states), ",".join(sorted(roles)) or "<none>", _age(node, now),
            info.get("kubeletVersion", ""), address("InternalIP"), address("ExternalIP"),
            info.get("osImage") or "<unknown>", info.get("kernelVersion") or "<unknown>",
            info.get("containerRuntimeVersion") or "<unknown>"]


def _namespace_cells(ns: Obj, now: float) -> list[Any]:
    return [_name(ns), str(_m(ns, "status", "phase") or ""), _age(ns, now)]


def _service_external_ip(svc: Obj) -> str:
    spec = svc.get("spec") or {}
    kind = spec.get("type") or "ClusterIP"
    external = [str(ip) for ip in _list(spec.get("externalIPs"))]
    if kind in ("ClusterIP", "NodePort"):
        return ",".join(external) or "<none>"
    if kind == "LoadBalancer":
        ingress = _list(_m(svc, "status", "loadBalancer", "ingress"))
        balancers = sorted({str(i.get("ip") or i.get("hostname")) for i in ingress
                            if i.get("ip") or i.get("hostname")})
        lb = ",".join(balancers)
        if len(lb) > 16:  # kubectl clips it outside -o wide; the server sends it whole
            lb = lb[:13] + "..."
        return ",".join([*([lb] if lb else []), *external]) or "<pending>"
    if kind == "ExternalName":
        return str(spec.get("externalName") or "")
    return "<unknown>"


def _service_cells(svc: Obj, now: float) -> list[Any]:
    spec = svc.get("spec") or {}
    ips = _list(spec.get("clusterIPs")) or ([spec["clusterIP"]] if spec.get("clusterIP") else [])
    ports = []
    for port in _list(spec.get("ports")):
        protocol = port.get("protocol") or "TCP"
        node_port = _int(port.get("nodePort"))
        ports.append(f"{port.get('port')}:{node_port}/{protocol}" if node_port > 0
                     else f"{port.get('port')}/{protocol}")
    return [_name(svc), spec.get("type") or "ClusterIP", str(ips[0]) if ips else "<none>",
            _service_external_ip(svc), ",".join(ports) or "<none>", _age(svc, now),
            format_labels(spec.get("selector"))]


def _event_cells(event: Obj, now: float) -> list[Any]:
    first = (_since(event.get("firstTimestamp"), now) if event.get("firstTimestamp")
             else _since(event.get("eventTime"), now))
    last = _since(event.get("lastTimestamp"), now) if event.get("lastTimestamp") else first
    count = _int(event.get("count"))
    series = event.get("series")
    if isinstance(series, Mapping):
        last = _since(series.get("lastObservedTime"), now)
        count = _int(series.get("count"))
    elif count == 0:
        count = 1
    involved = event.get("involvedObject") or {}
    kind = str(involved.get("kind") or "").lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    component = _m(event, "source", "component") or event.get("reportingComponent") or ""
    host = _m(event, "source", "host") or event.get("reportingInstance") or ""
    source = f"{component}, {host}" if host else str(component)
    return [last, event.get("type", ""), event.get("reason", ""), target,
            involved.get("fieldPath", ""), source, str(event.get("message") or "").strip(),
            first, count, _name(event)]


def _config_map_cells(cm: Obj, now: float) -> list[Any]:
    count = len(cm.get("data") or {}) + len(cm.get("binaryData") or {})
    return [_name(cm), count, _age(cm, now)]


def _secret_cells(secret: Obj, now: float) -> list[Any]:
    return [_name(secret), secret.get("type") or "Opaque", len(secret.get("data") or {}),
            _age(secret, now)]


def _service_account_cells(sa: Obj, now: float) -> list[Any]:
    return [_name(sa), len(_list(sa.get("secrets"))), _age(sa, now)]


def _lease_cells(lease: Obj, now: float) -> list[Any]:
    return [_name(lease), _m(lease, "spec", "holderIdentity") or "", _age(lease, now)]


def _replicas(obj: Obj) -> int:
    """spec.replicas as the API server defaults it (1 when unset)."""
    return _int(_m(obj, "spec", "replicas"), 1)


def _deployment_cells(d: Obj, now: float) -> list[Any]:
    status = d.get("status") or {}
    names, images = _containers(_m(d, "spec", "template", "spec"))
    return [_name(d), f"{_int(status.get('readyReplicas'))}/{_replicas(d)}",
            _int(status.get("updatedReplicas")), _int(status.get("availableReplicas")),
            _age(d, now), names, images, selector_string(_m(d, "spec", "selector"))]


def _replica_set_cells(rs: Obj, now: float) -> list[Any]:
    status = rs.get("status") or {}
    names, images = _containers(_m(rs, "spec", "template", "spec"))
    return [_name(rs), _replicas(rs), _int(status.get("replicas")),
            _int(status.get("readyReplicas")), _age(rs, now), names, images,
            format_selector(_m(rs, "spec", "selector"))]


def _job_condition(job: Obj, kind: str) -> bool:
    for condition in _list(_m(job, "status", "conditions")):
        if condition.get("type") == kind:
            return bool(condition.get("status") == "True")
    return False


def _job_cells(job: Obj, now: float) -> list[Any]:
    spec, status = job.get("spec") or {}, job.get("status") or {}
    succeeded = _int(status.get("succeeded"))
    completions, parallelism = spec.get("completions"), spec.get("parallelism")
    if completions is None and parallelism is None:
        completions = 1  # both unset: the API server defaults them to 1
    if isinstance(completions, int):
        shown = f"{succeeded}/{completions}"
    elif _int(parallelism) > 1:
        shown = f"{succeeded}/1 of {parallelism}"
    else:
        shown = f"{succeeded}/1"
    started, completed = _epoch(status.get("startTime")), _epoch(status.get("completionTime"))
    duration = ""
    if started is not None:
        duration = human_duration((completed if completed is not None else now) - started)
    if _job_condition(job, "Complete"):
        state = "Complete"
    elif _job_condition(job, "Failed"):
        state = "Failed"
    elif _m(job, "metadata", "deletionTimestamp"):
        state = "Terminating"
    elif _job_condition(job, "Suspended"):
        state = "Suspended"
    elif _job_condition(job, "FailureTarget"):
        state = "FailureTarget"
    else:
        state = "Running"
    names, images = _containers(_m(spec, "template", "spec"))
    return [_name(job), state, shown, duration, _age(job, now), names, images,
            format_selector(spec.get("selector"))]


def _network_policy_cells(policy: Obj, now: float) -> list[Any]:
    return [_name(policy), format_selector(_m(policy, "spec", "podSelector") or {}),
            _age(policy, now)]


def _binding_cells(binding: Obj, now: float) -> list[Any]:
    ref = binding.get("roleRef") or {}
    users, groups, accounts = [], [], []
    for subject in _list(binding.get("subjects")):
        kind, name = subject.get("kind"), str(subject.get("name", ""))
        if kind == "User":
            users.append(name)
        elif kind == "Group":
            groups.append(name)
        elif kind == "ServiceAccount":
            accounts.append(f"{subject.get('namespace', '')}/{name}")
    return [_name(binding), f"{ref.get('kind', '')}/{ref.get('name', '')}", _age(binding, now),
            ", ".join(users), ", ".join(groups), ", ".join(accounts)]


def _webhook_configuration_cells(config: Obj, now: float) -> list[Any]:
    return [_name(config), len(_list(config.get("webhooks"))), _age(config, now)]


def _default_cells(obj: Obj, _now: float) -> list[Any]:
    return [_name(obj), _m(obj, "metadata", "creationTimestamp") or ""]


# --------------------------------------------------------------------------------------------
# the printers


@dataclass(frozen=True)
class Column:
    name: str
    type: str = "string"
    priority: int = 0  # 1: shown by kubectl only with -o wide
    description: str = ""

    def definition(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type,
                "format": "name" if self.name == "Name" else "", "description": self.description,
                "priority": self.priority}


@dataclass(frozen=True)
class Printer:
    columns: tuple[Column, ...]
    cells: Callable[[Obj, float], list[Any]]


NAME = Column("Name", description="Name must be unique within a namespace.")
AGE = Column("Age", description="The time since the object was created.")
WIDE_TEMPLATE = (Column("Containers", priority=1, description="The template's container names."),
                 Column("Images", priority=1, description="The template's container images."),
                 Column("Selector", priority=1, description="The label selector of the pods."))

PRINTERS: dict[tuple[str, str, str], Printer] = {
    ("", "v1", "pods"): Printer((
        NAME, Column("Ready", description="Ready containers of all containers."),
        Column("Status", description="The pod's aggregate status."),
        Column("Restarts", description="Container restarts, and how long ago the last was."),
        AGE, Column("IP", priority=1), Column("Node", priority=1),
        Column("Nominated Node", priority=1), Column("Readiness Gates", priority=1),
    ), _pod_cells),
    ("", "v1", "nodes"): Printer((
        NAME, Column("Status"), Column("Roles"), AGE, Column("Version"),
        Column("Internal-IP", priority=1), Column("External-IP", priority=1),
        Column("OS-Image", priority=1), Column("Kernel-Version", priority=1),
        Column("Container-Runtime", priority=1),
    ), _node_cells),
    ("", "v1", "namespaces"): Printer((NAME, Column("Status"), AGE), _namespace_cells),
    ("", "v1", "services"): Printer((
        NAME, Column("Type"), Column("Cluster-IP"), Column("External-IP"), Column("Port(s)"), AGE,
        Column("Selector", priority=1),
    ), _service_cells),
    ("", "v1", "events"): Printer((
        Column("Last Seen"), Column("Type"), Column("Reason"), Column("Object"),
        Column("Subobject", priority=1), Column("Source", priority=1), Column("Message"),
        Column("First Seen", priority=1), Column("Count", priority=1),
        Column("Name", priority=1, description="Name must be unique within a namespace."),
    ), _event_cells),
    ("", "v1", "configmaps"): Printer((NAME, Column("Data"), AGE), _config_map_cells),
    ("", "v1", "secrets"): Printer((NAME, Column("Type"), Column("Data"), AGE), _secret_cells),
    ("", "v1", "serviceaccounts"): Printer((NAME, Column("Secrets"), AGE),
                                           _service_account_cells),
    ("coordination.k8s.io", "v1", "leases"): Printer((NAME, Column("Holder"), AGE), _lease_cells),
    ("apps", "v1", "deployments"): Printer((
        NAME, Column("Ready", description="Ready pods of the desired replicas."),
        Column("Up-to-date"), Column("Available"), AGE, *WIDE_TEMPLATE,
    ), _deployment_cells),
    ("apps", "v1", "replicasets"): Printer((
        NAME, Column("Desired", "integer"), Column("Current", "integer"),
        Column("Ready", "integer"), AGE, *WIDE_TEMPLATE,
    ), _replica_set_cells),
    ("batch", "v1", "jobs"): Printer((
        NAME, Column("Status"), Column("Completions"),
        Column("Duration", description="Time required to complete the job."), AGE, *WIDE_TEMPLATE,
    ), _job_cells),
    ("networking.k8s.io", "v1", "networkpolicies"): Printer(
        (NAME, Column("Pod-Selector"), AGE), _network_policy_cells),
    ("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations"): Printer(
        (NAME, Column("Webhooks", "integer", description="The number of webhooks."), AGE),
        _webhook_configuration_cells),
    **{("rbac.authorization.k8s.io", "v1", plural): Printer((
        NAME, Column("Role"), AGE, Column("Users", priority=1), Column("Groups", priority=1),
        Column("ServiceAccounts", priority=1),
    ), _binding_cells) for plural in ("rolebindings", "clusterrolebindings")},
}
# A built-in kind without a printer of its own: what the API server's default table shows.
DEFAULT = Printer((NAME, Column("Created At", "date", description="The creation timestamp.")),
                  _default_cells)


def _column_cell(column: PrinterColumn, path: JsonPath, obj: Obj, now: float) -> Any:
    """A CRD printer column's cell as the API server's table convertor computes it: null when
    the path finds nothing; a string column prints the first result; a date column is the
    HumanDuration since the timestamp; integer, number and boolean columns keep the JSON value."""
    found = path.find(obj)
    if not found:
        return None
    value = found[0]
    if column.type == "string":
        return jsonpath.text(value)
    if column.type == "date":
        return _since(value, now) if isinstance(value, str) else None
    if column.type == "integer":
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        return int(value) if numeric else None
    if column.type == "number":
        return value if isinstance(value, int | float) and not isinstance(value, bool) else None
    if column.type == "boolean":
        return value if isinstance(value, bool) else None
    return value


@functools.cache
def _custom_printer(rt: ResourceType) -> Printer:
    """A custom resource: NAME, then its CRD's printer columns (or AGE when it declares none)."""
    declared = rt.printer_columns or (AGE_COLUMN,)
    paths = [jsonpath.compile_path(c.json_path) for c in declared]

    def cells(obj: Obj, now: float) -> list[Any]:
        return [_name(obj), *(_column_cell(c, p, obj, now)
                              for c, p in zip(declared, paths, strict=True))]

    columns = [Column(c.name, c.type, c.priority, c.description) for c in declared]
    return Printer((NAME, *columns), cells)


def printer_for(rt: ResourceType) -> Printer:
    if rt.key in PRINTERS:
        return PRINTERS[rt.key]
    return DEFAULT if rt.builtin else _custom_printer(rt)


def table(
    rt: ResourceType,
    objects: Iterable[Obj],
    *,
    now: float,
    resource_version: str = "",
    continue_token: str | None = None,
) -> dict[str, Any]:
    """A Table listing `objects`; each row carries the full object for kubectl's -L/--show-labels."""
    printer = printer_for(rt)
    rows: Sequence[dict[str, Any]] = [
        {"cells": printer.cells(obj, now), "object": obj} for obj in objects
    ]
    metadata: dict[str, Any] = {"resourceVersion": resource_version}
    if continue_token:
        metadata["continue"] = continue_token
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": [c.definition() for c in printer.columns],
        "rows": list(rows),
    }
