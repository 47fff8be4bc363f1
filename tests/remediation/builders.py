"""Manifests (plain dicts, as the API returns them) for remediation tests: nodes, jobs of every
Kubeflow kind, their pods, and generic-group workloads."""

from __future__ import annotations

import copy
from typing import Any

from agent.model.finding import Finding
from agent.model.job import JobRef
from agent.model.verdict import Verdict
from agent.model.workload import JobKind
from agent.remediation.plan import LiveObjects

ZONE = "topology.kubernetes.io/zone"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
JOB_NAME = "training.kubeflow.org/job-name"

# kind -> (apiVersion, replica specs field, coordinator type, worker type)
KINDS: dict[str, tuple[str, str, str, str, JobKind]] = {
    "PyTorchJob": ("kubeflow.org/v1", "pytorchReplicaSpecs", "Master", "Worker", JobKind.PYTORCH),
    "TFJob": ("kubeflow.org/v1", "tfReplicaSpecs", "Chief", "Worker", JobKind.TF),
    "MPIJob": ("kubeflow.org/v1", "mpiReplicaSpecs", "Launcher", "Worker", JobKind.MPI),
    "MPIJob/v2beta1": ("kubeflow.org/v2beta1", "mpiReplicaSpecs", "Launcher", "Worker", JobKind.MPI),
    "XGBoostJob": ("kubeflow.org/v1", "xgbReplicaSpecs", "Master", "Worker", JobKind.XGBOOST),
    "PaddleJob": ("kubeflow.org/v1", "paddleReplicaSpecs", "Master", "Worker", JobKind.PADDLE),
    "JAXJob": ("kubeflow.org/v1", "jaxReplicaSpecs", "Worker", "Worker", JobKind.JAX),
}


def node(
    name: str, zone: str, *, gpus: int = 0, cpu: str = "32", memory: str = "128Gi",
    cordoned: bool = False, taints: list[dict[str, Any]] | None = None, **labels: str,
) -> dict[str, Any]:
    alloc = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus:
        alloc["nvidia.com/gpu"] = str(gpus)
    spec: dict[str, Any] = {}
    if taints is None and gpus:
        taints = [dict(GPU_TAINT)]
    if taints:
        spec["taints"] = taints
    if cordoned:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {ZONE: zone, "kubernetes.io/hostname": name, **labels}},
        "spec": spec, "status": {"allocatable": alloc},
    }  # fmt: skip


def cluster_nodes(*, cordon_a: bool = False, gpus: int = 8) -> list[dict[str, Any]]:
    """zone-a: two tainted GPU nodes; zone-b: two CPU nodes."""
    return [
        node("gpu-a-0", "zone-a", gpus=gpus, cordoned=cordon_a, gpu="true"),
        node("gpu-a-1", "zone-a", gpus=gpus, cordoned=cordon_a, gpu="true"),
        node("cpu-b-0", "zone-b"),
        node("cpu-b-1", "zone-b"),
    ]


def container(*, gpus: int = 0, cpu: str = "2", memory: str = "8Gi") -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": cpu, "memory": memory}
    resources: dict[str, Any] = {"requests": requests}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    return {"name": "main", "image": "registry.example.com/train:1", "resources": resources,
            "env": [{"name": "KEEP", "value": "me"}]}  # fmt: skip


def job(
    kind: str, name: str = "train", *, ns: str = "ml", workers: int = 2,
    coordinator_spec: dict[str, Any] | None = None, worker_spec: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None, template_labels: dict[str, str] | None = None,
    run_policy: dict[str, Any] | None = None, conditions: list[str] | None = None,
) -> dict[str, Any]:
    """A job of `kind` with a CPU coordinator (no GPU toleration) and GPU workers."""
    api_version, field, coord, worker, _ = KINDS[kind]
    worker_pod_spec = {"tolerations": [dict(GPU_TOLERATION)], "containers": [container(gpus=1)],
                       "nodeSelector": {"gpu": "true"}, **(worker_spec or {})}  # fmt: skip
    specs: dict[str, Any] = {
        worker: {"replicas": workers, "restartPolicy": "OnFailure",
                 "template": {"metadata": {"labels": {"app": name, **(template_labels or {})},
                                           "annotations": {"note": "kept"}},
                              "spec": worker_pod_spec}},
    }  # fmt: skip
    if coord != worker:
        specs[coord] = {
            "replicas": 1, "restartPolicy": "OnFailure",
            "template": {"metadata": {"labels": {"app": name, **(template_labels or {})}},
                         "spec": {"containers": [container()], **(coordinator_spec or {})}},
        }  # fmt: skip
    return {
        "apiVersion": api_version, "kind": kind.split("/", maxsplit=1)[0],
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "resourceVersion": "41",
                     "labels": labels or {}},
        "spec": {"runPolicy": {"cleanPodPolicy": "None", **(run_policy or {})}, field: specs},
        "status": {"conditions": [{"type": c, "status": "True"} for c in conditions or ["Running"]]},
    }  # fmt: skip


def pod(
    name: str, *, ns: str = "ml", node_name: str | None, labels: dict[str, str] | None = None,
    gpus: int = 0, owner: tuple[str, str, str] | None = None, phase: str = "Running",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": labels or {}}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": owner[0], "kind": owner[1], "name": owner[2],
                                    "uid": "u", "controller": True}]  # fmt: skip
    spec: dict[str, Any] = {"containers": [container(gpus=gpus)]}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            "status": {"phase": phase}}  # fmt: skip


def job_pods(kind: str, name: str = "train", *, workers: int = 2) -> list[dict[str, Any]]:
    """The coordinator on a zone-b CPU node, the workers on zone-a GPU nodes."""
    api_version, _, coord, worker, _ = KINDS[kind]
    owner = (api_version, kind.split("/", maxsplit=1)[0], name)
    out = []
    if coord != worker:
        out.append(pod(f"{name}-{coord.lower()}-0", node_name="cpu-b-0",
                       labels={JOB_NAME: name}, owner=owner))  # fmt: skip
    for i in range(workers):
        on = "cpu-b-1" if coord == worker and i == 0 else f"gpu-a-{i % 2}"
        out.append(pod(f"{name}-worker-{i}", node_name=on, labels={JOB_NAME: name},
                       gpus=1, owner=owner))  # fmt: skip
    return out


def finding(
    kind: JobKind, name: str = "train", *, ns: str = "ml", target: str | None = "zone-a",
    verdict: Verdict = Verdict.ZONE_SPLIT_BLOCKED, remediable: bool = True,
) -> Finding:
    return Finding(job=JobRef(kind, ns, name), verdict=verdict,
                   zones={"zone-a": 2, "zone-b": 1}, coordinator=None,
                   remediable=remediable, target_zone=target)  # fmt: skip


def deployment(name: str, *, ns: str = "ml", labels: dict[str, str], replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "resourceVersion": "7"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name, **labels}},
                              "spec": {"containers": [container()]}}},
    }  # fmt: skip


def replicaset(name: str, deployment_name: str, *, ns: str = "ml") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": ns, "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment_name, "uid": "d",
             "controller": True}]},
        "spec": {},
    }  # fmt: skip


def batch_job(name: str, *, ns: str = "ml", labels: dict[str, str], parallelism: int = 2) -> dict[str, Any]:
    uid = f"uid-{name}"
    controller = {"batch.kubernetes.io/controller-uid": uid, "controller-uid": uid,
                  "batch.kubernetes.io/job-name": name, "job-name": name}  # fmt: skip
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "uid": uid, "resourceVersion": "9",
                     "creationTimestamp": "2026-01-01T00:00:00Z", "generation": 1,
                     "labels": {"team": "lab", **controller}},
        "spec": {"parallelism": parallelism, "completions": parallelism, "backoffLimit": 4,
                 "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}},
                 "template": {"metadata": {"labels": {"app": name, **labels, **controller}},
                              "spec": {"restartPolicy": "Never", "nodeSelector": {"gpu": "true"},
                                       "tolerations": [dict(GPU_TOLERATION)],
                                       "containers": [container(gpus=1)]}}},
        "status": {"active": parallelism},
    }  # fmt: skip


def copy_of(obj: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(obj)


def live(obj: dict[str, Any], *, nodes: list[dict[str, Any]] | None = None,
         bound: list[dict[str, Any]] | None = None) -> LiveObjects:  # fmt: skip
    kind = str(obj["kind"]) + ("/v2beta1" if obj["apiVersion"].endswith("v2beta1") else "")
    pods = job_pods(kind, obj["metadata"]["name"])
    return LiveObjects(job=obj, pods=pods, nodes=nodes or cluster_nodes(),
                       bound_pods=pods + (bound or []))  # fmt: skip


def group_live(*, coordinator_zone_node: str = "cpu-b-0") -> LiveObjects:
    workloads = [
        deployment("coordinator", labels={"zone": "zone-b", "role": "coordinator"}),
        replicaset("coordinator-5d9f", "coordinator"),
        batch_job("workers-a", labels={"zone": "zone-a", "role": "worker"}),
        batch_job("workers-b", labels={"zone": "zone-b", "role": "worker"}, parallelism=1),
    ]
    pods = [
        pod("coordinator-5d9f-x", node_name=coordinator_zone_node, labels={"zone": "zone-b"},
            owner=("apps/v1", "ReplicaSet", "coordinator-5d9f")),
        pod("workers-a-1", node_name="gpu-a-0", gpus=1, labels={"zone": "zone-a"},
            owner=("batch/v1", "Job", "workers-a")),
        pod("workers-a-2", node_name="gpu-a-1", gpus=1, labels={"zone": "zone-a"},
            owner=("batch/v1", "Job", "workers-a")),
        pod("workers-b-1", node_name="cpu-b-1", gpus=1, labels={"zone": "zone-b"},
            owner=("batch/v1", "Job", "workers-b")),
    ]  # fmt: skip
    return LiveObjects(job=None, pods=pods, nodes=cluster_nodes(), bound_pods=pods, workloads=workloads)
