"""Slimming: keep only the fields the diagnosis needs from a watched object, in manifest shape.

Called by `agent.sources.kube` on every listed or watched object (parsed by orjson). The result is
still a manifest-shaped dict (`apiVersion`, `kind`, `metadata`, `spec`, `status`) so the core's
snapshot loader reads the cache exactly as it reads `kubectl get -o json`. Dropping volatile fields
(resourceVersion, managedFields, conditions' timestamps, container statuses) also means an update
that changes nothing the diagnosis sees compares equal, and triggers no re-diagnosis. Pure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from agent.model.descriptor import TemplateLayout
from agent.model.workload import KUEUE, WORKLOADS, KueueKindName
from agent.sources.resources import Resource, Role

GPU_MARKER = "gpu"
# the conditions the diagnosis reads of a job: suspended, finished (Succeeded, Failed)
JOB_CONDITIONS = frozenset(
    {c for w in WORKLOADS for c in (w.conditions.suspended, *w.conditions.finished) if c}
)

Obj = dict[str, Any]

# the pod-template annotations of Kueue's Topology Aware Scheduling a job's templates keep
TAS_ANNOTATIONS = (KUEUE.topology_annotation, KUEUE.preferred_annotation,
                   KUEUE.unconstrained_annotation, KUEUE.group_annotation)  # fmt: skip


def _template_meta(meta: Any) -> Obj:
    """A pod template's metadata: its labels, and its Kueue topology annotations when set."""
    meta = meta if isinstance(meta, dict) else {}
    out: Obj = {"labels": meta.get("labels") or {}}
    annotations = meta.get("annotations")
    if isinstance(annotations, dict):
        kept = {k: annotations[k] for k in TAS_ANNOTATIONS if k in annotations}
        if kept:
            out["annotations"] = kept
    return out


class Sharer:
    """Structural sharing of equal sub-objects (containers, tolerations, owner refs, node
    selectors, affinity) across cached objects: thousands of pods of one job hold one copy
    (keyed by their JSON in the order listed: equal parts from one server list keys alike).
    Shared values must never be mutated (the cache and the core only read them). Bounded:
    cleared when full."""

    def __init__(self, capacity: int = 200_000) -> None:
        self.capacity = capacity
        self._table: dict[bytes, Any] = {}

    def __call__(self, value: Any) -> Any:
        if not value:
            return value
        key = orjson.dumps(value)  # key order as listed: equal objects of one source agree
        found = self._table.get(key)
        if found is not None:
            return found
        if len(self._table) >= self.capacity:
            self._table.clear()
        self._table[key] = value
        return value

    def memo(self, tag: bytes, raw: Any, build: Callable[[], Any]) -> Any:
        """The shared slim form of a raw sub-object: built once per distinct raw JSON (the
        containers of a job's pods are slimmed once, not once per pod)."""
        key = tag + orjson.dumps(raw)
        found = self._table.get(key)
        if found is None:
            found = self(build())
            if len(self._table) >= self.capacity:
                self._table.clear()
            self._table[key] = found
        return found


def _same(value: Any) -> Any:
    return value


def _memo(share: Callable[[Any], Any], tag: bytes, raw: Any, build: Callable[[], Any]) -> Any:
    if isinstance(share, Sharer):
        return share.memo(tag, raw, build)
    return share(build())


def _meta(obj: Obj, *, owners: bool = True, share: Callable[[Any], Any] = _same) -> Obj:
    meta = obj.get("metadata") or {}
    out: Obj = {"name": meta.get("name", "")}
    if meta.get("namespace"):
        out["namespace"] = meta["namespace"]
    if meta.get("uid"):
        out["uid"] = meta["uid"]
    if meta.get("labels"):
        out["labels"] = meta["labels"]
    if meta.get("deletionTimestamp"):
        out["deletionTimestamp"] = meta["deletionTimestamp"]
    refs = meta.get("ownerReferences") if owners else None
    if refs:
        out["ownerReferences"] = _memo(
            share,
            b"o",
            refs,
            lambda: [
                {k: ref[k] for k in ("apiVersion", "kind", "name", "uid", "controller") if k in ref}
                for ref in refs
                if isinstance(ref, dict)
            ],
        )
    return out


def _gpu_resources(resources: Any) -> Obj:
    out: Obj = {}
    if not isinstance(resources, dict):
        return out
    for section in ("requests", "limits"):
        values = resources.get(section)
        if isinstance(values, dict):
            kept = None  # a plain loop: a comprehension per section costs a frame each
            for k in values:
                if GPU_MARKER in k:
                    if kept is None:
                        kept = {}
                    kept[k] = values[k]
            if kept:
                out[section] = kept
    return out


def _container(c: Any) -> Obj:
    if not isinstance(c, dict):
        return {}
    out: Obj = {"name": c.get("name", "")}
    if c.get("ports"):
        out["ports"] = [
            {k: p[k] for k in ("name", "containerPort", "protocol") if k in p}
            for p in c["ports"]
            if isinstance(p, dict)
        ]
    res = _gpu_resources(c.get("resources"))
    if res:
        out["resources"] = res
    return out


def slim_pod(obj: Obj, share: Callable[[Any], Any] = _same) -> Obj:
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    containers = spec.get("containers") or []
    out_spec: Obj = {
        "containers": _memo(share, b"c", containers, lambda: [_container(c) for c in containers])
    }
    for key in ("nodeName", "serviceAccountName", "nodeSelector", "tolerations", "affinity"):
        if spec.get(key):
            out_spec[key] = spec[key] if key == "nodeName" else share(spec[key])
    out: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(obj, share=share),
        "spec": out_spec,
        "status": _status(status.get("phase") or "Pending"),
    }
    return out


_OWNER_KEYS = ("apiVersion", "kind", "name", "uid", "controller")
_SHARED_SPEC = ("serviceAccountName", "nodeSelector", "tolerations", "affinity")


def _pod_slimmer(share: Sharer) -> Callable[[Obj], Obj]:
    """`slim_pod` with `share`, on the informer's path: the same output (and the same sharing),
    with the memo lookups made in place (150,000 pods at start-up: no closure or call per part
    that the table already holds)."""
    table = share._table
    dumps = orjson.dumps

    def slim(obj: Obj) -> Obj:
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        containers = spec.get("containers") or []
        key = b"c" + dumps(containers)
        shared = table.get(key)
        if shared is None:
            shared = share.memo(b"c", containers, lambda: [_container(c) for c in containers])
        out_spec: Obj = {"containers": shared}
        node = spec.get("nodeName")
        if node:
            out_spec["nodeName"] = node
        for name in _SHARED_SPEC:
            value = spec.get(name)
            if value:
                out_spec[name] = share(value)
        meta = obj.get("metadata") or {}
        out_meta: Obj = {"name": meta.get("name", "")}
        for name in ("namespace", "uid", "labels", "deletionTimestamp"):
            value = meta.get(name)
            if value:
                out_meta[name] = value
        refs = meta.get("ownerReferences")
        if refs:
            key = b"o" + dumps(refs)
            owners = table.get(key)
            if owners is None:
                owners = share.memo(b"o", refs, lambda: [
                    {k: ref[k] for k in _OWNER_KEYS if k in ref}
                    for ref in refs if isinstance(ref, dict)
                ])  # fmt: skip
            out_meta["ownerReferences"] = owners
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": out_meta,
            "spec": out_spec,
            "status": _status(status.get("phase") or "Pending"),
        }

    return slim


_STATUSES: dict[str, Obj] = {}


def _status(phase: str) -> Obj:
    """One shared `{"phase": ...}` per phase (never mutated)."""
    found = _STATUSES.get(phase)
    if found is None:
        if len(_STATUSES) > 64:  # phases are a handful; an odd server cannot grow this
            _STATUSES.clear()
        found = _STATUSES[phase] = {"phase": phase}
    return found


def slim_node(obj: Obj) -> Obj:
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    out_spec: Obj = {}
    if spec.get("taints"):
        out_spec["taints"] = spec["taints"]
    if spec.get("unschedulable"):
        out_spec["unschedulable"] = True
    allocatable = status.get("allocatable") or {}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": _meta(obj, owners=False),
        "spec": out_spec,
        "status": {"allocatable": {k: v for k, v in allocatable.items() if GPU_MARKER in k}},
    }


def slim_namespace(obj: Obj) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(obj, owners=False)}


def slim_policy(obj: Obj, resource: Resource) -> Obj:
    out: Obj = {
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": _meta(obj, owners=False),
    }
    for key in ("spec", "specs"):
        if key in obj:
            out[key] = obj[key]
    return out


def slim_config(obj: Obj, resource: Resource) -> Obj:
    """A ConfigMap read for its string `data` only."""
    data = obj.get("data")
    return {
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": _meta(obj, owners=False),
        "data": {k: v for k, v in data.items() if isinstance(v, str)}
        if isinstance(data, dict)
        else {},
    }


def slim_job(obj: Obj, resource: Resource) -> Obj:
    """A training job: the spec fields its kind's descriptor reads suspend and managedBy from
    (`runPolicy`, kept whole when a mapping) and, for replica specs, each replica's `replicas`
    (default 1) and its template's labels; for replicated jobs (JobSet), each one's name,
    `replicas`, Job template labels (the Trainer's ancestor step), `parallelism`,
    `completions` and pod template labels, and the coordinator the object names; its metadata
    with `creationTimestamp` (which instance of the job this is)."""
    spec = obj.get("spec") or {}
    out_spec: Obj = {}
    kind = resource.workload
    if kind is not None:
        for path in (kind.suspension.suspend, kind.suspension.managed_by):
            top = path[1]
            if top in spec and (len(path) == 2 or isinstance(spec[top], dict)):
                out_spec[top] = spec[top]
        field = kind.templates.field
        value = spec.get(field)
        if kind.templates.layout is TemplateLayout.REPLICA_SPECS and isinstance(value, dict):
            out_spec[field] = _slim_replica_specs(value)
        if kind.templates.layout is TemplateLayout.REPLICATED_JOBS and isinstance(value, list):
            env = kind.coordinator.port_env
            out_spec[field] = [_slim_replicated_job(r, env) for r in value if isinstance(r, dict)]
        declared = kind.coordinator.declared
        if declared is not None and len(declared) == 2 and declared[1] in spec:
            out_spec[declared[1]] = spec[declared[1]]
    # only the conditions the diagnosis reads (finished, suspended): Running <-> Restarting churn
    # of a crash-looping job must not look like a change
    conditions = [
        {"type": c.get("type"), "status": c.get("status")}
        for c in (obj.get("status") or {}).get("conditions") or []
        if isinstance(c, dict) and c.get("type") in JOB_CONDITIONS
    ]
    meta = _meta(obj)
    created = (obj.get("metadata") or {}).get("creationTimestamp")
    if created:  # which instance of the job this is (set once: never a change)
        meta["creationTimestamp"] = created
    return {
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": meta,
        "spec": out_spec,
        "status": {"conditions": conditions},
    }


def _slim_replica_specs(specs: Obj) -> Obj:
    replicas: Obj = {}
    for rtype, rspec in specs.items():
        if not isinstance(rspec, dict):
            continue
        template = rspec.get("template") or {}
        tmeta = template.get("metadata") or {}
        replicas[rtype] = {
            "replicas": rspec.get("replicas", 1),
            "template": {"metadata": _template_meta(tmeta)},
        }
    return replicas


def _slim_replicated_job(rjob: Obj, port_env: tuple[str, ...]) -> Obj:
    out: Obj = {k: rjob[k] for k in ("name", "replicas") if k in rjob}
    template = rjob.get("template")
    if not isinstance(template, dict):
        return out
    out_template: Obj = {}
    labels = (template.get("metadata") or {}).get("labels")
    if isinstance(labels, dict) and labels:
        out_template["metadata"] = {"labels": labels}
    job_spec = template.get("spec")
    if isinstance(job_spec, dict):
        out_job: Obj = {k: job_spec[k] for k in ("parallelism", "completions") if k in job_spec}
        pod = job_spec.get("template")
        pod = pod if isinstance(pod, dict) else {}
        pod_meta = _template_meta(pod.get("metadata"))
        if not pod_meta["labels"]:
            del pod_meta["labels"]
        out_pod: Obj = {"metadata": pod_meta} if pod_meta else {}
        containers = [_port_env(c, port_env) for c in (pod.get("spec") or {}).get("containers") or []
                      if isinstance(c, dict)]
        if any(containers):
            out_pod["spec"] = {"containers": containers}
        out_job["template"] = out_pod
        out_template["spec"] = out_job
    out["template"] = out_template
    return out


def _port_env(container: Obj, names: tuple[str, ...]) -> Obj:
    """A container of a replicated job's template: only the env vars naming the master port."""
    env = [{"name": e["name"], "value": e.get("value")} for e in container.get("env") or []
           if isinstance(e, dict) and e.get("name") in names]
    return {"env": env} if env else {}


OWNER_COUNTS = ("replicas", "parallelism", "completions")


def slim_owner(obj: Obj, resource: Resource) -> Obj:
    """Ownership chain, plus what says how many pods the workload expects (Deployment and
    ReplicaSet `replicas`, batch Job `parallelism`/`completions`) and its pod template's labels:
    the cache knows from them when a generic group's last pod is bound."""
    out: Obj = {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": _meta(obj)}
    spec = obj.get("spec")
    if isinstance(spec, dict):
        out_spec: Obj = {k: spec[k] for k in OWNER_COUNTS if k in spec}
        template = spec.get("template")
        labels = (template.get("metadata") or {}).get("labels") if isinstance(template, dict) else None
        if isinstance(labels, dict) and labels:
            out_spec["template"] = {"metadata": {"labels": labels}}
        if out_spec:
            out["spec"] = out_spec
    return out


MAX_MESSAGE = 1024  # an Event message longer than this is cut (Cilium's are one line)


def slim_event(obj: Obj) -> Obj:
    """What the drop event reader needs of a core/v1 Event: who it names, why, what it says."""
    involved = obj.get("involvedObject")
    involved = involved if isinstance(involved, dict) else {}
    source = obj.get("source") or {}
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": _meta(obj, owners=False),
        "involvedObject": {
            k: involved[k] for k in ("kind", "namespace", "name", "uid") if k in involved
        },
        "reason": obj.get("reason"),
        "message": str(obj.get("message") or "")[:MAX_MESSAGE],
        "type": obj.get("type"),
        "count": obj.get("count"),
        "source": {"component": source.get("component")} if isinstance(source, dict) else {},
        "lastTimestamp": obj.get("lastTimestamp") or obj.get("eventTime"),
    }


def _dict(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def _keep(obj: Any, keys: tuple[str, ...]) -> Obj:
    obj = obj if isinstance(obj, dict) else {}
    return {k: obj[k] for k in keys if k in obj}


def _slim_pod_set(pod_set: Obj) -> Obj:
    """A Workload PodSet: its name, count and its template's Kueue topology annotations."""
    out: Obj = {k: pod_set[k] for k in ("name", "count") if k in pod_set}
    template = pod_set.get("template")
    meta = _template_meta(template.get("metadata") if isinstance(template, dict) else None)
    if "annotations" in meta:
        out["template"] = {"metadata": {"annotations": meta["annotations"]}}
    return out


def slim_kueue(obj: Obj, resource: Resource, kind: KueueKindName) -> Obj:
    """A Kueue object: what `agent.snapshot.kueue` reads of it. A Workload: `spec.active`,
    `queueName`, its PodSets' names, counts and templates' topology annotations, its admission and its `Admitted` condition (status only);
    a ClusterQueue: its resource groups and `status.flavorsReservation`; a LocalQueue its
    ClusterQueue; a ResourceFlavor its `topologyName` and `nodeLabels`; a Topology its levels."""
    spec: Obj = _dict(obj.get("spec"))
    status: Obj = _dict(obj.get("status"))
    out_status: Obj = {}
    if kind is KueueKindName.WORKLOAD:
        out_spec = _keep(spec, ("active", "queueName"))
        out_spec["podSets"] = [_slim_pod_set(p) for p in spec.get("podSets") or [] if isinstance(p, dict)]
        out_status = _keep(status, ("admission",))
        out_status["conditions"] = [{"type": c.get("type"), "status": c.get("status")}
                                    for c in status.get("conditions") or []
                                    if isinstance(c, dict) and c.get("type") == "Admitted"]  # fmt: skip
    elif kind is KueueKindName.CLUSTER_QUEUE:
        out_spec = _keep(spec, ("resourceGroups",))
        out_status = _keep(status, ("flavorsReservation",))
    elif kind is KueueKindName.LOCAL_QUEUE:
        out_spec = _keep(spec, ("clusterQueue",))
    elif kind is KueueKindName.RESOURCE_FLAVOR:
        out_spec = _keep(spec, ("topologyName", "nodeLabels"))
    else:
        out_spec = _keep(spec, ("levels",))
    return {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": _meta(obj),
            "spec": out_spec, "status": out_status}  # fmt: skip


def slimmer(resource: Resource, share: Callable[[Any], Any] = _same) -> Callable[[Obj], Obj]:
    """The slimming function for objects of `resource` (pods share equal parts via `share`)."""
    if resource.role is Role.POD:
        return _pod_slimmer(share) if isinstance(share, Sharer) else lambda obj: slim_pod(obj, share)
    if resource.role is Role.NODE:
        return slim_node
    if resource.role is Role.NAMESPACE:
        return slim_namespace
    if resource.role is Role.POLICY:
        return lambda obj: slim_policy(obj, resource)
    if resource.role is Role.JOB:
        return lambda obj: slim_job(obj, resource)
    if resource.role is Role.DATAPLANE:
        return lambda obj: slim_config(obj, resource)
    if resource.role is Role.EVENT:
        return slim_event
    if resource.role is Role.KUEUE and resource.kueue is not None:
        kind = resource.kueue.kind
        return lambda obj: slim_kueue(obj, resource, kind)
    return lambda obj: slim_owner(obj, resource)
