"""Replica types, indexes and the coordinator of a Kubeflow job's pods (training-operator v1).

Coordinator: the pod labelled `training.kubeflow.org/job-role=master` if any; else by kind:
PyTorchJob/XGBoostJob/PaddleJob Master (else Worker 0), TFJob Chief, then Master (else Worker 0),
MPIJob the launcher, JAXJob Worker 0. Called by `agent.topology.jobs`. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from agent.model.cluster import Pod
from agent.model.workload import JobKind
from agent.parsing.numbers import NumberError, parse_int

JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"
OPERATOR_NAME_LABEL = "training.kubeflow.org/operator-name"

OPERATOR_KINDS: Mapping[str, JobKind] = {
    "pytorchjob-controller": JobKind.PYTORCH,
    "tfjob-controller": JobKind.TF,
    "mpijob-controller": JobKind.MPI,
    "mpi-operator": JobKind.MPI,
    "xgboostjob-controller": JobKind.XGBOOST,
    "paddlejob-controller": JobKind.PADDLE,
    "jaxjob-controller": JobKind.JAX,
}

_NAME_TAIL = re.compile(r"-([a-z]+)-([0-9]{1,9})$")
MAX_REPLICA_INDEX = 1_000_000


def replica_type(pod: Pod, job_name: str) -> str:
    """Lower-case replica type from the label, the v2beta1 job-role, or the pod name."""
    labels = pod.labels
    value = labels.get(REPLICA_TYPE_LABEL)
    if value:
        return value.lower()
    role = labels.get(JOB_ROLE_LABEL)
    if role in ("launcher", "worker"):
        return role
    if pod.name.startswith(f"{job_name}-launcher"):
        return "launcher"
    match = _NAME_TAIL.search(pod.name)
    return match.group(1) if match else "worker"


def replica_index(pod: Pod) -> int | None:
    value = pod.labels.get(REPLICA_INDEX_LABEL)
    if value is not None:
        try:
            return parse_int(value, field=REPLICA_INDEX_LABEL, maximum=MAX_REPLICA_INDEX)
        except NumberError:
            pass  # not an index (e.g. "²"): fall back to the pod name
    match = _NAME_TAIL.search(pod.name)
    return int(match.group(2)) if match else None


_PREFERENCE: Mapping[JobKind, tuple[str, ...]] = {
    JobKind.PYTORCH: ("master",),
    JobKind.XGBOOST: ("master",),
    JobKind.PADDLE: ("master",),
    JobKind.TF: ("chief", "master"),
    JobKind.MPI: ("launcher",),
    JobKind.JAX: (),
}


def find_coordinator(kind: JobKind, pods: Sequence[Pod], *, types: Mapping[str, str]) -> Pod | None:
    """The coordinator among `pods` (sorted by name), or None when it has no pod yet."""
    for pod in pods:
        if pod.labels.get(JOB_ROLE_LABEL) == "master":
            return pod
    for wanted in _PREFERENCE.get(kind, ()):
        for pod in pods:
            if types[pod.name] == wanted:
                return pod
    if kind is JobKind.MPI:
        return None
    for pod in pods:
        if types[pod.name] == "worker" and replica_index(pod) == 0:
            return pod
    return None
