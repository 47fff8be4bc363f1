"""Who trains in a JobSet, for the twin's training model: the gang, its coordinator and its port.

Called by `training_runtime` for every JobSet (a Kubeflow TrainJob's, or one run on its own for
JAX or PyTorch) with the JobSet and its live pods. Pure. The rules:
- initializers (a replicated job named, or labelled `trainer.kubeflow.org/trainjob-ancestor-step`,
  `dataset-initializer` / `model-initializer`) run before training and are outside the gang;
- a replicated job named `launcher` (the Trainer's MPI runtime) holds launchers: they dial every
  node on the nodes' SSH port (a container port named `ssh`, else the sshd readiness probe's,
  else 22) and hold no GPU rank;
- otherwise the coordinator is `spec.coordinator` when set, else rank 0: the pod of job index 0
  and completion index 0 of the `node` replicated job (torch, `PET_MASTER_ADDR`), or of the
  first replicated job; the other ranks dial it on `PET_MASTER_PORT` / `MASTER_PORT` from its
  container's env, else its first container port, else 29500;
- the gang needs `replicas x min(parallelism, completions)` pods of each of its replicated jobs.
It does not decide connectivity or timing (`dataplane`, `training`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.twin import jobset_children as children

ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
INITIALIZERS = ("dataset-initializer", "model-initializer")
LAUNCHER = "launcher"
NODE = "node"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
DEFAULT_PORT = 29500
SSH_PORT = 22
MASTER = "master"
LAUNCHER_ROLE = "launcher"
RANK = ""


@dataclass(frozen=True)
class Gang:
    """The live gang pods by name with their role (master, launcher, or "" for a rank), the
    port the ranks (or the launchers) dial, and how many pods the gang needs running."""

    roles: Mapping[str, str]
    port: int
    expected: int


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def is_initializer(rjob: Mapping[str, Any]) -> bool:
    labels = ((rjob.get("template") or {}).get("metadata") or {}).get("labels") or {}
    return rjob.get("name") in INITIALIZERS or labels.get(ANCESTOR) in INITIALIZERS


def _pods_needed(rjob: Mapping[str, Any]) -> int:
    job_spec = (rjob.get("template") or {}).get("spec") or {}
    parallelism = int(job_spec.get("parallelism", 1))
    completions = job_spec.get("completions")
    per_job = min(parallelism, int(completions)) if completions is not None else parallelism
    return children.replicas(rjob) * per_job


def _containers(rjob: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    pod = (((rjob.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
    return [c for c in pod.get("containers") or [] if isinstance(c, Mapping)]


def ssh_port(rjob: Mapping[str, Any]) -> int:
    for container in _containers(rjob):
        for port in container.get("ports") or []:
            if port.get("name") == "ssh" and port.get("containerPort"):
                return int(port["containerPort"])
        probe = ((container.get("readinessProbe") or {}).get("tcpSocket") or {}).get("port")
        if isinstance(probe, int):
            return probe
    return SSH_PORT


def master_port(rjob: Mapping[str, Any]) -> int:
    containers = _containers(rjob)
    for container in containers:
        for env in container.get("env") or []:
            if env.get("name") in ("PET_MASTER_PORT", "MASTER_PORT") and str(
                env.get("value", "")).isdigit():
                return int(env["value"])
    for container in containers:
        for port in container.get("ports") or []:
            if port.get("containerPort"):
                return int(port["containerPort"])
    return DEFAULT_PORT


def _coordinator(js: Mapping[str, Any], gang: Sequence[Mapping[str, Any]]) -> tuple[str, int, int]:
    declared = children.spec(js).get("coordinator")
    if isinstance(declared, Mapping):
        return (str(declared.get("replicatedJob")), int(declared.get("jobIndex", 0)),
                int(declared.get("podIndex", 0)))  # fmt: skip
    names = [str(r.get("name")) for r in gang]
    return (NODE if NODE in names else names[0]), 0, 0


def gang(js: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> Gang:
    """The gang of a JobSet among its live pods."""
    members = [r for r in children.replicated_jobs(js) if not is_initializer(r)]
    if not members:
        return Gang({}, DEFAULT_PORT, 0)
    by_name = {str(r.get("name")): r for r in members}
    launcher = LAUNCHER in by_name and len(by_name) > 1
    ranks = [r for r in members if not (launcher and r.get("name") == LAUNCHER)]
    coordinator = _coordinator(js, ranks)
    roles: dict[str, str] = {}
    for pod in pods:
        labels = _labels(pod)
        rjob = str(labels.get(children.REPLICATED_JOB, ""))
        if rjob not in by_name:
            continue
        if launcher and rjob == LAUNCHER:
            roles[_name(pod)] = LAUNCHER_ROLE
            continue
        index = ((pod.get("metadata") or {}).get("annotations") or {}).get(COMPLETION_INDEX)
        where = (rjob, int(labels.get(children.JOB_INDEX, "0")), int(index or 0))
        roles[_name(pod)] = MASTER if not launcher and where == coordinator else RANK
    dialed = by_name.get(coordinator[0], ranks[0])
    port = ssh_port(ranks[0]) if launcher else master_port(dialed)
    return Gang(roles, port, sum(_pods_needed(r) for r in members))
