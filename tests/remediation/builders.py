"""The remediation lab's manifests: its nodes, a job of every Kubeflow kind with its pods, and
generic-group workloads, built with the shared builders of `tests.support.objects`.

Who calls it: remediation tests (plan, dry run, preview, room). What it does not do: build an object
kind of its own; it only sets the lab's sizes, containers and placements."""

from __future__ import annotations

import copy
from functools import partial
from typing import Any

from agent.model.finding import Finding
from agent.model.job import JobRef
from agent.model.verdict import Verdict
from agent.model.workload import JobKind
from agent.remediation.plan import LiveObjects
from tests.support import objects
from tests.support.objects import GPU_TOLERATION, JOB_NAME, replicaset

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

# The lab's nodes and pods: the shared builders with the lab's sizes and training container.
node = partial(objects.node, cpu="32", memory="128Gi", pods=110)


def container(*, gpus: int = 0, cpu: str = "2", memory: str = "8Gi") -> dict[str, Any]:
    """The lab's training container (requests, GPU limits, an env var that must survive)."""
    return objects.container(image="registry.example.com/train:1", gpus=gpus, cpu=cpu,
                             memory=memory, env={"KEEP": "me"})  # fmt: skip


def pod(
    name: str, *, ns: str = "ml", node_name: str | None, labels: dict[str, str] | None = None,
    gpus: int = 0, owner: tuple[str, str, str] | None = None, phase: str = "Running",
) -> dict[str, Any]:
    return objects.pod(name, ns=ns, node_name=node_name, labels=labels, owner=owner,
                       containers=[container(gpus=gpus)], phase=phase)  # fmt: skip



def cluster_nodes(*, cordon_a: bool = False, gpus: int = 8) -> list[dict[str, Any]]:
    """zone-a: two tainted GPU nodes; zone-b: two CPU nodes."""
    return [
        node("gpu-a-0", "zone-a", gpus=gpus, cordoned=cordon_a, gpu="true"),
        node("gpu-a-1", "zone-a", gpus=gpus, cordoned=cordon_a, gpu="true"),
        node("cpu-b-0", "zone-b"),
        node("cpu-b-1", "zone-b"),
    ]


def job(
    kind: str, name: str = "train", *, ns: str = "ml", workers: int = 2,
    coordinator_spec: dict[str, Any] | None = None, worker_spec: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None, template_labels: dict[str, str] | None = None,
    run_policy: dict[str, Any] | None = None, conditions: list[str] | None = None,
) -> dict[str, Any]:
    """The lab's job of `kind`: a CPU coordinator (no GPU toleration) and GPU workers."""
    api_version, _, coord, worker, _ = KINDS[kind]
    template = {"app": name, **(template_labels or {})}
    replicas = {worker: objects.replica(
        workers, {"tolerations": [dict(GPU_TOLERATION)], "containers": [container(gpus=1)],
                  "nodeSelector": {"gpu": "true"}, **(worker_spec or {})},
        labels=template, annotations={"note": "kept"})}  # fmt: skip
    if coord != worker:
        replicas[coord] = objects.replica(
            1, {"containers": [container()], **(coordinator_spec or {})}, labels=template)
    return objects.training_job(
        kind.split("/", maxsplit=1)[0], name, ns=ns, api_version=api_version, uid=f"uid-{name}",
        resource_version="41", labels=labels, replicas=replicas,
        run_policy={"cleanPodPolicy": "None", **(run_policy or {})},
        conditions=conditions or ["Running"])  # fmt: skip


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
    return objects.deployment(name, ns=ns, replicas=replicas, template={
        "metadata": {"labels": {"app": name, **labels}}, "spec": {"containers": [container()]}})


def batch_job(name: str, *, ns: str = "ml", labels: dict[str, str], parallelism: int = 2) -> dict[str, Any]:
    """A batch Job of GPU workers in the lab."""
    return objects.batch_job(name, ns=ns, parallelism=parallelism, labels={"team": "lab"}, template={
        "metadata": {"labels": {"app": name, **labels}},
        "spec": {"restartPolicy": "Never", "nodeSelector": {"gpu": "true"},
                 "tolerations": [dict(GPU_TOLERATION)], "containers": [container(gpus=1)]}})  # fmt: skip


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
