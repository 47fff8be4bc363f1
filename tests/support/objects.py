"""Kubernetes objects for tests, as plain dicts shaped as the API server returns them.

Who calls it: every test that describes a cluster as manifests (snapshot, topology, diagnosis, the
diagnose command, the cache, remediation, the runtime world, the twin). One builder per object
kind: `node`, `namespace`, `pod` (and `container`, `owner_ref`), `job_pod` (a pod of a Kubeflow
training job, labelled as the training operator labels it), `training_job` (by the kind's
descriptor in `agent.model.workload`) with `replica`, `jobset` with `replicated_job`, `trainjob`,
`jobset_pod` (a pod of a JobSet's child Job, labelled as the JobSet and Job controllers label
it), `batch_job`, `deployment`, `replicaset`,
`cnp` / `zone_only` (Cilium) and `netpol` (Kubernetes NetworkPolicy); `as_list` wraps objects in a
`v1/List` as `kubectl get -o json` prints it. Options past the name are keyword-only; a key a test
did not ask for is left out rather than filled with a default the API server would not send.

What it does not do: parse (see `tests.support.snapshots`), talk to an API server, or hold a
folder's scenarios (a folder keeps those in its own support module, built from these).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from agent.model.workload import JOBSET, TRAINJOB, JobKind, workload, workload_named

ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"
GPU_TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}

JOB_NAME = "training.kubeflow.org/job-name"
REPLICA_TYPE = "training.kubeflow.org/replica-type"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
JOB_ROLE = "training.kubeflow.org/job-role"
OPERATOR = "training.kubeflow.org/operator-name"

OPERATORS = {
    "PyTorchJob": "pytorchjob-controller",
    "TFJob": "tfjob-controller",
    "MPIJob": "mpijob-controller",
    "XGBoostJob": "xgboostjob-controller",
    "PaddleJob": "paddlejob-controller",
    "JAXJob": "jaxjob-controller",
}

Owner = tuple[str, str, str]  # (apiVersion, kind, name) of a controller
Ports = Sequence[tuple[str | None, int]] | Sequence[tuple[str | None, int, str]]


def node(
    name: str,
    zone: str | None = None,
    *,
    gpus: int = 0,
    cpu: str | None = "64",
    memory: str | None = None,
    pods: int | None = None,
    taints: list[dict[str, Any]] | None = None,
    cordoned: bool = False,
    hostname: bool = True,
    capacity: bool = False,
    kind: bool = True,
    **labels: str,
) -> dict[str, Any]:
    """A node in `zone` (no zone label when None). A GPU node is tainted with `GPU_TAINT` unless
    `taints` says otherwise (`taints=[]`: an empty list, untainted). `capacity` repeats the
    allocatable resources as the capacity; `kind=False` leaves out apiVersion and kind."""
    all_labels = {HOSTNAME: name} if hostname else {}
    if zone is not None:
        all_labels[ZONE] = zone
    all_labels.update(labels)
    allocatable: dict[str, Any] = {}
    if cpu is not None:
        allocatable["cpu"] = cpu
    if memory is not None:
        allocatable["memory"] = memory
    if pods is not None:
        allocatable["pods"] = str(pods)
    if gpus:
        allocatable[GPU] = str(gpus)
    if taints is None and gpus:
        taints = [dict(GPU_TAINT)]
    spec: dict[str, Any] = {}
    if taints is not None:
        spec["taints"] = taints
    if cordoned:
        spec["unschedulable"] = True
    status: dict[str, Any] = {"allocatable": allocatable}
    if capacity:
        status["capacity"] = allocatable
    obj = {"metadata": {"name": name, "labels": all_labels}, "spec": spec, "status": status}
    return {"apiVersion": "v1", "kind": "Node", **obj} if kind else obj


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **labels}},
    }


def container(
    *,
    name: str = "main",
    image: str = "img",
    gpus: int = 0,
    cpu: str | None = None,
    memory: str | None = None,
    ports: Ports | None = None,
    env: Mapping[str, str] | None = None,
    limits: bool = True,
    request_gpus: bool = False,
) -> dict[str, Any]:
    """A container. `cpu`/`memory` are requests (GPUs join them when one is, or with
    `request_gpus`); GPUs are also limits unless `limits=False`. `ports` are (name, number) or (name, number, protocol)."""
    out: dict[str, Any] = {"name": name, "image": image}
    requests: dict[str, str] = {}
    if cpu is not None:
        requests["cpu"] = cpu
    if memory is not None:
        requests["memory"] = memory
    if (requests or request_gpus) and gpus:
        requests[GPU] = str(gpus)
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if gpus and limits:
        resources["limits"] = {GPU: str(gpus)}
    if resources:
        out["resources"] = resources
    if ports:
        out["ports"] = [
            {"containerPort": p[1], **({"name": p[0]} if p[0] else {}),
             **({"protocol": p[2]} if len(p) > 2 else {})}  # type: ignore[misc]
            for p in ports
        ]  # fmt: skip
    if env:
        out["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return out


def owner_ref(owner: Owner, *, uid: str | None = "u") -> dict[str, Any]:
    """The controller reference to `owner` (apiVersion, kind, name)."""
    ref: dict[str, Any] = {"apiVersion": owner[0], "kind": owner[1], "name": owner[2]}
    if uid is not None:
        ref["uid"] = uid
    ref["controller"] = True
    return ref


_DERIVED = "derived"


def pod(
    name: str,
    *,
    ns: str | None = "ml",
    node_name: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    uid: str | None = None,
    owner: Owner | None = None,
    owner_refs: list[dict[str, Any]] | None = None,
    deleting: bool = False,
    gpus: int = 0,
    ports: Ports | None = None,
    containers: list[dict[str, Any]] | None = None,
    service_account: str | None = None,
    spec: Mapping[str, Any] | None = None,
    phase: str | None = _DERIVED,
    status: Mapping[str, Any] | None = None,
    kind: bool = True,
) -> dict[str, Any]:
    """A pod. `owner` is its controller (apiVersion, kind, name) or `owner_refs` its references
    as given; `containers` replaces the one `main` container (with `gpus`, `ports`); `spec` adds
    fields to the spec. `phase`: Running when bound, else Pending, unless given; None leaves the
    status out, unless `status` (extra status fields) is given. `kind=False` leaves out apiVersion
    and kind; `ns=None`, the namespace."""
    meta: dict[str, Any] = {"name": name}
    if ns is not None:
        meta["namespace"] = ns
    if uid is not None:
        meta["uid"] = uid
    meta["labels"] = dict(labels or {})
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    if owner is not None:
        owner_refs = [owner_ref(owner)]
    if owner_refs is not None:
        meta["ownerReferences"] = owner_refs
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    body: dict[str, Any] = {
        "containers": containers if containers is not None
        else [container(gpus=gpus, ports=ports)],
    }  # fmt: skip
    if node_name is not None:
        body["nodeName"] = node_name
    if service_account is not None:
        body["serviceAccountName"] = service_account
    body.update(spec or {})
    obj: dict[str, Any] = {"metadata": meta, "spec": body}
    if phase == _DERIVED:
        phase = "Running" if node_name else "Pending"
    if phase is not None or status is not None:
        obj["status"] = {**({"phase": phase} if phase is not None else {}), **(status or {})}
    return {"apiVersion": "v1", "kind": "Pod", **obj} if kind else obj


def job_pod(
    kind: str,
    job: str,
    rtype: str,
    index: int,
    *,
    node_name: str | None,
    ns: str = "ml",
    gpus: int = 1,
    ports: Ports | None = None,
    extra: dict[str, str] | None = None,
    coordinator: bool = False,
    phase: str | None = None,
    name: str | None = None,
    containers: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A training-operator v1 pod, named `<job>-<type>-<index>` unless `name` says otherwise."""
    labels = {
        JOB_NAME: job,
        OPERATOR: OPERATORS[kind],
        REPLICA_TYPE: rtype,
        REPLICA_INDEX: str(index),
        **(extra or {}),
    }
    if coordinator:
        labels[JOB_ROLE] = "master"
    return pod(
        name or f"{job}-{rtype}-{index}",
        ns=ns,
        node_name=node_name,
        labels=labels,
        gpus=gpus,
        ports=ports,
        containers=containers,
        phase=phase or ("Running" if node_name else "Pending"),
        owner=("kubeflow.org/v1", kind, job),
    )


def replica(
    count: int,
    spec: Mapping[str, Any],
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    restart_policy: str | None = "OnFailure",
) -> dict[str, Any]:
    """One replica spec of a Kubeflow job: `count` pods from a template with pod `spec`."""
    meta: dict[str, Any] = {"labels": dict(labels or {})}
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    out: dict[str, Any] = {"replicas": count}
    if restart_policy is not None:
        out["restartPolicy"] = restart_policy
    out["template"] = {"metadata": meta, "spec": dict(spec)}
    return out


def training_job(
    kind: str,
    name: str,
    *,
    ns: str = "ml",
    api_version: str | None = None,
    uid: str | None = None,
    resource_version: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    run_policy: dict[str, Any] | None = None,
    replicas: Mapping[str, Mapping[str, Any]] | None = None,
    conditions: list[str] | None = None,
    status: bool = True,
) -> dict[str, Any]:
    """A Kubeflow job of `kind` (apiVersion: the descriptor's preferred one unless given);
    `replicas` (replica type -> `replica(...)`) go where the kind's descriptor keeps its pod
    templates; `conditions` are the types that are True; `status=False` leaves the status out."""
    descriptor = workload_named(kind)
    assert descriptor is not None, kind
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if uid is not None:
        meta["uid"] = uid
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    meta["labels"] = labels or {}
    if annotations:
        meta["annotations"] = dict(annotations)
    spec: dict[str, Any] = {}
    if run_policy is not None or replicas is None:
        spec["runPolicy"] = run_policy or {}
    if replicas is not None:
        spec[descriptor.templates.field] = {k: dict(v) for k, v in replicas.items()}
    obj: dict[str, Any] = {
        "apiVersion": api_version or descriptor.api_version,
        "kind": kind,
        "metadata": meta,
        "spec": spec,
    }
    if status:
        obj["status"] = {"conditions": [{"type": c, "status": "True"} for c in conditions or []]}
    return obj


def batch_job(
    name: str,
    *,
    ns: str = "ml",
    template: Mapping[str, Any],
    parallelism: int = 2,
    labels: Mapping[str, str] | None = None,
    active: int | None = None,
    managed_by: str | None = None,
) -> dict[str, Any]:
    """A batch/v1 Job as the Job controller leaves it: controller-uid labels on the job, its
    selector and its pod template (`template`: {metadata: {labels}, spec})."""
    uid = f"uid-{name}"
    controller = {"batch.kubernetes.io/controller-uid": uid, "controller-uid": uid,
                  "batch.kubernetes.io/job-name": name, "job-name": name}  # fmt: skip
    template_meta = dict(template.get("metadata") or {})
    template_meta["labels"] = {**template_meta.get("labels", {}), **controller}
    managed = {"managedBy": managed_by} if managed_by is not None else {}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "uid": uid, "resourceVersion": "9",
                     "creationTimestamp": "2026-01-01T00:00:00Z", "generation": 1,
                     "labels": {**(labels or {}), **controller}},
        "spec": {"parallelism": parallelism, "completions": parallelism, "backoffLimit": 4,
                 "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}},
                 "template": {"metadata": template_meta, "spec": dict(template["spec"])},
                 **managed},
        "status": {"active": parallelism if active is None else active},
    }  # fmt: skip


def deployment(
    name: str, *, ns: str = "ml", template: Mapping[str, Any], replicas: int = 1
) -> dict[str, Any]:
    """An apps/v1 Deployment selecting `app: name`, with pod `template` ({metadata, spec})."""
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "resourceVersion": "7"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": dict(template)},
    }  # fmt: skip


def replicaset(name: str, deployment_name: str, *, ns: str = "ml") -> dict[str, Any]:
    """An apps/v1 ReplicaSet owned by the Deployment `deployment_name`."""
    return {
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": ns, "ownerReferences": [
            owner_ref(("apps/v1", "Deployment", deployment_name), uid="d")]},
        "spec": {},
    }  # fmt: skip


def cnp(
    name: str, spec: Mapping[str, Any] | None = None, *, ns: str | None = "ml", specs: Any = None
) -> dict[str, Any]:
    """A CiliumNetworkPolicy, or a CiliumClusterwideNetworkPolicy when `ns` is None; `spec` and
    `specs` (Cilium's list form) are left out when None."""
    meta: dict[str, Any] = {"name": name}
    if ns is not None:
        meta["namespace"] = ns
    kind = "CiliumNetworkPolicy" if ns is not None else "CiliumClusterwideNetworkPolicy"
    obj: dict[str, Any] = {"apiVersion": "cilium.io/v2", "kind": kind, "metadata": meta}
    if spec is not None:
        obj["spec"] = dict(spec)
    if specs is not None:
        obj["specs"] = specs
    return obj


def zone_only(
    zone: str, *, key: str = "zone", ns: str | None = "ml", name: str | None = None
) -> dict[str, Any]:
    """Pods labelled `key=zone` accept ingress only from pods with the same label."""
    return cnp(
        name or f"{zone}-only",
        {
            "endpointSelector": {"matchLabels": {key: zone}},
            "ingress": [{"fromEndpoints": [{"matchLabels": {key: zone}}]}],
        },
        ns=ns,
    )


def netpol(name: str, spec: Mapping[str, Any], *, ns: str = "ml") -> dict[str, Any]:
    """A Kubernetes NetworkPolicy."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": ns},
        "spec": dict(spec),
    }


def as_list(items: list[dict[str, Any]]) -> bytes:
    """`items` as one `v1/List` JSON document."""
    return orjson.dumps({"apiVersion": "v1", "kind": "List", "items": items})


JOBSET_LABELS = workload(JobKind.JOBSET).labels


def replicated_job(
    name: str, *, replicas: int | None = None, nodes: int = 1, gpus: int = 0,
    ports: Ports | None = None, step: str | None = None, spec: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One replicated job of a JobSet: `replicas` Indexed batch Jobs of `nodes` pods each (one
    container `node`); `step`: the Trainer's ancestor-step label on the Job template."""
    pod_spec = {"containers": [container(name="node", gpus=gpus, ports=ports)], **(spec or {})}
    template: dict[str, Any] = {"spec": {"completionMode": "Indexed", "parallelism": nodes,
                                         "completions": nodes, "template": {"spec": pod_spec}}}
    if step is not None:
        template["metadata"] = {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": step}}
    out: dict[str, Any] = {"name": name, "template": template}
    if replicas is not None:
        out["replicas"] = replicas
    return out


def jobset(
    name: str, replicated: Sequence[Mapping[str, Any]], *, ns: str = "ml",
    trainjob: bool = False, coordinator: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None, suspend: bool | None = None,
    managed_by: str | None = None, conditions: Sequence[str] = (),
) -> dict[str, Any]:
    """A jobset.x-k8s.io JobSet; `trainjob`: owned (controller) by the TrainJob of its name."""
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": f"uid-js-{name}",
                            "labels": dict(labels or {})}
    if trainjob:
        meta["ownerReferences"] = [owner_ref((TRAINJOB.api_version, TRAINJOB.kind.value, name),
                                             uid=f"uid-tj-{name}")]
    spec: dict[str, Any] = {"replicatedJobs": [dict(r) for r in replicated]}
    if coordinator is not None:
        spec["coordinator"] = dict(coordinator)
    if suspend is not None:
        spec["suspend"] = suspend
    if managed_by is not None:
        spec["managedBy"] = managed_by
    return {"apiVersion": JOBSET.api_version, "kind": JOBSET.kind.value, "metadata": meta,
            "spec": spec,
            "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]}}


def trainjob(
    name: str, *, ns: str = "ml", nodes: int = 2, labels: Mapping[str, str] | None = None,
    suspend: bool | None = None, managed_by: str | None = None, conditions: Sequence[str] = (),
) -> dict[str, Any]:
    """A trainer.kubeflow.org TrainJob over the ClusterTrainingRuntime `torch-distributed`."""
    spec: dict[str, Any] = {"runtimeRef": {"name": "torch-distributed"},
                            "trainer": {"numNodes": nodes}}
    if suspend is not None:
        spec["suspend"] = suspend
    if managed_by is not None:
        spec["managedBy"] = managed_by
    return {"apiVersion": TRAINJOB.api_version, "kind": TRAINJOB.kind.value,
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-tj-{name}",
                         "labels": dict(labels or {})},
            "spec": spec,
            "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]}}


def jobset_pod(
    jobset_name: str, rjob: str, job_index: int, index: int, *, node_name: str | None,
    ns: str = "ml", gpus: int = 0, ports: Ports | None = None, phase: str | None = None,
    labels: Mapping[str, str] | None = None, index_label: bool = True,
) -> dict[str, Any]:
    """A pod of JobSet `jobset_name`'s Job `<jobset>-<rjob>-<job_index>` at completion index
    `index`, named `<job>-<index>-<suffix>` as the Job controller names Indexed pods."""
    job = f"{jobset_name}-{rjob}-{job_index}"
    found = {JOBSET_LABELS.job_name: jobset_name, JOBSET_LABELS.replica_type: rjob,
             JOBSET_LABELS.replica_index: str(job_index), **(labels or {})}
    if index_label and JOBSET_LABELS.completion_index is not None:
        found[JOBSET_LABELS.completion_index] = str(index)
    annotations = ({JOBSET_LABELS.completion_index: str(index)}
                   if JOBSET_LABELS.completion_index is not None else {})
    return pod(f"{job}-{index}-x{job_index}{index}z", ns=ns, node_name=node_name, labels=found,
               annotations=annotations, gpus=gpus, ports=ports,
               phase=phase or ("Running" if node_name else "Pending"),
               owner=("batch/v1", "Job", job))
