"""The Kubeflow training kinds the twin's operator runs, and the pods and services each job wants.

Called by `operator_training` (the controller) to turn a job object into the pods, headless services
(and, for mpi-operator's v2beta1 MPIJob, the launcher batch Job) it should own. Pure: JSON dicts in,
JSON dicts out. It follows the Kubeflow training-operator v1 (labels
`training.kubeflow.org/job-name`, `replica-type` in lower case, `replica-index`, `operator-name`,
and `job-role=master` on the coordinator only; pod names `<job>-<type>-<index>`; a controller
ownerReference to the job; the kind's named port; its env) and mpi-operator v2beta1 for that MPIJob.
It does not talk to the store and does not decide when to create or delete.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]

LABEL_JOB_NAME = "training.kubeflow.org/job-name"
LABEL_REPLICA_TYPE = "training.kubeflow.org/replica-type"
LABEL_REPLICA_INDEX = "training.kubeflow.org/replica-index"
LABEL_OPERATOR = "training.kubeflow.org/operator-name"
LABEL_JOB_ROLE = "training.kubeflow.org/job-role"


@dataclass(frozen=True)
class TrainingKind:
    """One row per training kind: where its replica specs live and how its pods are wired."""

    kind: str
    version: str
    plural: str
    specs_field: str
    replica_types: tuple[str, ...]  # canonical spelling, in creation order
    coordinators: tuple[str, ...]  # the first present type's index 0 gets job-role=master
    port_name: str
    default_port: int
    container: str  # the container the operator injects env into
    operator_name: str
    env: Callable[[EnvContext], list[dict[str, str]]]

    @property
    def api_version(self) -> str:
        return f"kubeflow.org/{self.version}"


@dataclass(frozen=True)
class EnvContext:
    job: str
    namespace: str
    replica_type: str
    index: int
    replicas: Mapping[str, int]  # canonical type -> count
    port: int


def _master_addr(ctx: EnvContext, master: str) -> str:
    if ctx.replicas.get(master):
        return f"{ctx.job}-{master.lower()}-0"
    return f"{ctx.job}-worker-0"


def _rank(ctx: EnvContext, master: str) -> int:
    if ctx.replica_type == master:
        return 0
    return ctx.index + (1 if ctx.replicas.get(master) else 0)


def _pytorch_env(ctx: EnvContext) -> list[dict[str, str]]:
    return [
        {"name": "MASTER_PORT", "value": str(ctx.port)},
        {"name": "MASTER_ADDR", "value": _master_addr(ctx, "Master")},
        {"name": "WORLD_SIZE", "value": str(sum(ctx.replicas.values()))},
        {"name": "RANK", "value": str(_rank(ctx, "Master"))},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
    ]


def _tf_env(ctx: EnvContext) -> list[dict[str, str]]:
    cluster = {
        rtype.lower(): [
            f"{ctx.job}-{rtype.lower()}-{i}.{ctx.namespace}.svc:{ctx.port}" for i in range(count)
        ]
        for rtype, count in ctx.replicas.items()
        if rtype != "Evaluator" and count
    }
    config = {
        "cluster": cluster,
        "task": {"type": ctx.replica_type.lower(), "index": ctx.index},
        "environment": "cloud",
    }
    return [{"name": "TF_CONFIG", "value": json.dumps(config, sort_keys=True)}]


def _xgboost_env(ctx: EnvContext) -> list[dict[str, str]]:
    return [
        {"name": "MASTER_PORT", "value": str(ctx.port)},
        {"name": "MASTER_ADDR", "value": _master_addr(ctx, "Master")},
        {"name": "WORLD_SIZE", "value": str(sum(ctx.replicas.values()))},
        {"name": "RANK", "value": str(_rank(ctx, "Master"))},
    ]


def _paddle_env(ctx: EnvContext) -> list[dict[str, str]]:
    return [
        {"name": "PADDLE_MASTER", "value": f"{_master_addr(ctx, 'Master')}:{ctx.port}"},
        {"name": "PADDLE_NNODES", "value": str(sum(ctx.replicas.values()))},
        {"name": "PADDLE_JOB_ID", "value": ctx.job},
    ]


def _jax_env(ctx: EnvContext) -> list[dict[str, str]]:
    return [
        {"name": "COORDINATOR_ADDRESS", "value": f"{ctx.job}-worker-0:{ctx.port}"},
        {"name": "NUM_PROCESSES", "value": str(sum(ctx.replicas.values()))},
        {"name": "PROCESS_ID", "value": str(ctx.index)},
    ]


def _mpi_env(ctx: EnvContext) -> list[dict[str, str]]:
    if ctx.replica_type == "Launcher":
        return [{"name": "OMPI_MCA_orte_default_hostfile", "value": "/etc/mpi/hostfile"}]
    return []


KINDS: dict[tuple[str, str], TrainingKind] = {
    (k.version, k.plural): k
    for k in (
        TrainingKind("PyTorchJob", "v1", "pytorchjobs", "pytorchReplicaSpecs", ("Master", "Worker"),
                     ("Master", "Worker"), "pytorchjob-port", 23456, "pytorch",
                     "pytorchjob-controller", _pytorch_env),
        TrainingKind("TFJob", "v1", "tfjobs", "tfReplicaSpecs",
                     ("Chief", "Master", "PS", "Worker", "Evaluator"), ("Chief", "Master", "Worker"),
                     "tfjob-port", 2222, "tensorflow", "tfjob-controller", _tf_env),
        TrainingKind("MPIJob", "v1", "mpijobs", "mpiReplicaSpecs", ("Launcher", "Worker"),
                     ("Launcher",), "ssh", 22, "mpi", "mpijob-controller", _mpi_env),
        TrainingKind("XGBoostJob", "v1", "xgboostjobs", "xgbReplicaSpecs", ("Master", "Worker"),
                     ("Master", "Worker"), "xgboostjob-port", 9999, "xgboost",
                     "xgboostjob-controller", _xgboost_env),
        TrainingKind("PaddleJob", "v1", "paddlejobs", "paddleReplicaSpecs", ("Master", "Worker"),
                     ("Master", "Worker"), "master", 36543, "paddle", "paddlejob-controller",
                     _paddle_env),
        TrainingKind("JAXJob", "v1", "jaxjobs", "jaxReplicaSpecs", ("Worker",), ("Worker",),
                     "jaxjob-port", 6666, "jax", "jaxjob-controller", _jax_env),
        TrainingKind("MPIJob", "v2beta1", "mpijobs", "mpiReplicaSpecs", ("Launcher", "Worker"),
                     ("Launcher",), "ssh", 22, "mpi", "mpi-operator", _mpi_env),
    )
}  # fmt: skip

MPI_V2 = KINDS[("v2beta1", "mpijobs")]


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    found: Mapping[str, Any] = obj.get("metadata") or {}
    return found


def replica_specs(kind: TrainingKind, job: Mapping[str, Any]) -> dict[str, Obj]:
    """Replica specs keyed by canonical type (the API accepts any case, e.g. `master`)."""
    raw = (job.get("spec") or {}).get(kind.specs_field) or {}
    out: dict[str, Obj] = {}
    for name, spec in raw.items():
        for canonical in kind.replica_types:
            if canonical.lower() == str(name).lower():
                out[canonical] = spec
    return {t: out[t] for t in kind.replica_types if t in out}


def replica_counts(kind: TrainingKind, job: Mapping[str, Any]) -> dict[str, int]:
    return {t: int(s.get("replicas", 1)) for t, s in replica_specs(kind, job).items()}


def coordinator(kind: TrainingKind, job: Mapping[str, Any]) -> str | None:
    """The replica type whose index 0 pod gets `job-role=master`."""
    counts = replica_counts(kind, job)
    for rtype in kind.coordinators:
        if counts.get(rtype):
            return rtype
    return None


def run_policy(job: Mapping[str, Any]) -> Mapping[str, Any]:
    found: Mapping[str, Any] = (job.get("spec") or {}).get("runPolicy") or {}
    return found


def is_suspended(job: Mapping[str, Any]) -> bool:
    return bool(run_policy(job).get("suspend", False))


def owner_reference(kind: TrainingKind, job: Mapping[str, Any]) -> Obj:
    return {
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "name": meta(job).get("name"),
        "uid": meta(job).get("uid"),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _container_port(template: Mapping[str, Any], kind: TrainingKind) -> int:
    for container in (template.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == kind.port_name and port.get("containerPort"):
                return int(port["containerPort"])
    return kind.default_port


def job_port(kind: TrainingKind, job: Mapping[str, Any]) -> int:
    specs = replica_specs(kind, job)
    rtype = coordinator(kind, job) or next(iter(specs), None)
    if rtype is None:
        return kind.default_port
    return _container_port(specs[rtype].get("template") or {}, kind)


def pod_name(job: str, rtype: str, index: int) -> str:
    return f"{job}-{rtype.lower()}-{index}"


def _labels(
    kind: TrainingKind, job: str, rtype: str, index: int, role: str | None
) -> dict[str, str]:
    if kind is MPI_V2:
        labels = {
            LABEL_OPERATOR: kind.operator_name,
            LABEL_JOB_NAME: job,
            LABEL_JOB_ROLE: rtype.lower(),
        }
        if rtype == "Worker":
            labels[LABEL_REPLICA_INDEX] = str(index)
        return labels
    labels = {
        LABEL_OPERATOR: kind.operator_name,
        LABEL_JOB_NAME: job,
        LABEL_REPLICA_TYPE: rtype.lower(),
        LABEL_REPLICA_INDEX: str(index),
    }
    if role:
        labels[LABEL_JOB_ROLE] = role
    return labels


def _inject_env(spec: Obj, container_name: str, env: list[dict[str, str]]) -> None:
    containers = spec.get("containers") or []
    if not containers:
        return
    target = next((c for c in containers if c.get("name") == container_name), containers[0])
    existing = {e.get("name") for e in target.get("env") or []}
    target["env"] = list(target.get("env") or []) + [e for e in env if e["name"] not in existing]


def pod_template_for(
    kind: TrainingKind, job: Mapping[str, Any], rtype: str, index: int
) -> tuple[dict[str, str], Obj]:
    """(labels, pod spec) for one replica, built from the job's current template."""
    name = str(meta(job).get("name"))
    namespace = str(meta(job).get("namespace") or "default")
    spec = replica_specs(kind, job)[rtype]
    template = copy.deepcopy(spec.get("template") or {})
    pod_spec: Obj = template.get("spec") or {}
    role = "master" if rtype == coordinator(kind, job) and index == 0 else None
    labels = {**((template.get("metadata") or {}).get("labels") or {})}
    labels.update(_labels(kind, name, rtype, index, role))
    restart = spec.get("restartPolicy") or "OnFailure"
    pod_spec["restartPolicy"] = "Never" if restart == "ExitCode" else restart
    ctx = EnvContext(
        job=name,
        namespace=namespace,
        replica_type=rtype,
        index=index,
        replicas=replica_counts(kind, job),
        port=job_port(kind, job),
    )
    _inject_env(pod_spec, kind.container, kind.env(ctx))
    return labels, pod_spec


def desired_pod(kind: TrainingKind, job: Mapping[str, Any], rtype: str, index: int) -> Obj:
    name = str(meta(job).get("name"))
    labels, spec = pod_template_for(kind, job, rtype, index)
    template = replica_specs(kind, job)[rtype].get("template") or {}
    annotations = dict((template.get("metadata") or {}).get("annotations") or {})
    pod_name_ = pod_name(name, rtype, index)
    spec.setdefault("hostname", pod_name_)
    spec.setdefault("subdomain", name if kind is MPI_V2 else pod_name_)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name_,
            "namespace": meta(job).get("namespace") or "default",
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(kind, job)],
        },
        "spec": spec,
    }


def desired_pods(kind: TrainingKind, job: Mapping[str, Any]) -> list[Obj]:
    """Every pod the operator keeps for this job (for v2beta1 MPIJob: the workers only)."""
    out: list[Obj] = []
    for rtype, count in replica_counts(kind, job).items():
        if kind is MPI_V2 and rtype == "Launcher":
            continue
        out.extend(desired_pod(kind, job, rtype, i) for i in range(count))
    return out


def desired_services(kind: TrainingKind, job: Mapping[str, Any]) -> list[Obj]:
    """Headless services: one per replica pod (training-operator), one per job (mpi-operator)."""
    name = str(meta(job).get("name"))
    namespace = meta(job).get("namespace") or "default"
    port = job_port(kind, job)

    def service(svc_name: str, selector: dict[str, str]) -> Obj:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": svc_name,
                "namespace": namespace,
                "labels": {k: v for k, v in selector.items() if k != LABEL_REPLICA_INDEX},
                "ownerReferences": [owner_reference(kind, job)],
            },
            "spec": {
                "clusterIP": "None",
                "selector": selector,
                "ports": [{"name": kind.port_name, "port": port, "targetPort": port}],
                "publishNotReadyAddresses": True,
            },
        }

    if kind is MPI_V2:
        return [service(name, {LABEL_JOB_NAME: name, LABEL_JOB_ROLE: "worker"})]
    out = []
    for rtype, count in replica_counts(kind, job).items():
        for i in range(count):
            selector = {
                LABEL_OPERATOR: kind.operator_name,
                LABEL_JOB_NAME: name,
                LABEL_REPLICA_TYPE: rtype.lower(),
                LABEL_REPLICA_INDEX: str(i),
            }
            out.append(service(pod_name(name, rtype, i), selector))
    return out


def desired_launcher_job(job: Mapping[str, Any]) -> Obj | None:
    """mpi-operator v2beta1: the launcher runs as a batch Job `<job>-launcher` owned by the MPIJob."""
    specs = replica_specs(MPI_V2, job)
    if "Launcher" not in specs:
        return None
    name = str(meta(job).get("name"))
    labels, spec = pod_template_for(MPI_V2, job, "Launcher", 0)
    template = specs["Launcher"].get("template") or {}
    annotations = dict((template.get("metadata") or {}).get("annotations") or {})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{name}-launcher",
            "namespace": meta(job).get("namespace") or "default",
            "labels": dict(labels),
            "ownerReferences": [owner_reference(MPI_V2, job)],
        },
        "spec": {
            "backoffLimit": 6,
            "suspend": is_suspended(job),
            "template": {"metadata": {"labels": labels, "annotations": annotations}, "spec": spec},
        },
    }


def launcher_scheduling(job: Mapping[str, Any]) -> dict[str, Any]:
    """The launcher template fields mpi-operator (v0.8+) re-syncs on resume: nodeSelector, tolerations."""
    spec = (replica_specs(MPI_V2, job).get("Launcher", {}).get("template") or {}).get("spec") or {}
    return {
        "nodeSelector": spec.get("nodeSelector"),
        "tolerations": spec.get("tolerations"),
    }
