"""Replica types, indexes and the coordinator of a training job's pods.

The labels read and the coordinator rule are the kind's descriptor's (`agent.model.workload`).
Kubeflow training-operator v1: the pod whose role label names the coordinator
(`training.kubeflow.org/job-role=master`) if any; else the first replica type of the kind's
preference present (PyTorchJob/XGBoostJob/PaddleJob Master, TFJob Chief then Master, MPIJob the
launcher); else Worker 0 (never for an MPIJob). JobSet and TrainJob (pods of replicated jobs,
each pod at a Job index and a completion index): the launcher when the gang has one beside
other replicated jobs (MPI); else the pod the JobSet names in `spec.coordinator`; else rank 0
(Job index 0, completion index 0) of `node`, else of the gang's first replicated job. A rank 0
that has no live pod is no coordinator (never another rank in its place).
Called by `agent.topology.jobs`. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import lru_cache

from agent.model.cluster import DeclaredCoordinator, Pod
from agent.model.descriptor import GangLabels
from agent.model.workload import KUBEFLOW_LABELS, JobKind, workload
from agent.parsing.numbers import NumberError, parse_int

_NAME_TAIL = re.compile(r"-([a-z]+)-([0-9]{1,9})$")
MAX_REPLICA_INDEX = 1_000_000


def replica_type(pod: Pod, job_name: str, gang: GangLabels = KUBEFLOW_LABELS) -> str:
    """Lower-case replica type from the label, the v2beta1 job-role, or the pod name."""
    labels = pod.labels
    value = labels.get(gang.replica_type)
    if value:
        return value.lower()
    role = labels.get(gang.job_role) if gang.job_role else None
    if role in ("launcher", "worker"):
        return role
    if pod.name.startswith(f"{job_name}-launcher"):
        return "launcher"
    match = _NAME_TAIL.search(pod.name)
    return match.group(1) if match else "worker"


@lru_cache(maxsize=4096)
def _index(value: str, label: str) -> int | None:
    """The index a label's value names, None when it is not one (a job's pods share a few
    values: each is parsed once)."""
    try:
        return parse_int(value, field=label, maximum=MAX_REPLICA_INDEX)
    except NumberError:
        return None


def replica_index(pod: Pod, gang: GangLabels = KUBEFLOW_LABELS) -> int | None:
    value = pod.labels.get(gang.replica_index)
    if value is not None:
        index = _index(value, gang.replica_index)
        if index is not None:
            return index  # else not an index (e.g. "²"): fall back to the pod name
    match = _NAME_TAIL.search(pod.name)
    return int(match.group(2)) if match else None


def completion_index(pod: Pod, gang: GangLabels) -> int | None:
    """The pod's index in its Indexed batch Job (the label Kubernetes 1.28+ sets beside the
    annotation), None when the kind has none or the label is absent or not an index."""
    if gang.completion_index is None:
        return None
    value = pod.labels.get(gang.completion_index)
    return None if value is None else _index(value, gang.completion_index)


def _rank(pods: Sequence[Pod], types: Mapping[str, str], gang: GangLabels, *,
          replica: str, job_index: int = 0, pod_index: int = 0) -> Pod | None:  # fmt: skip
    for pod in pods:
        if (types[pod.name] == replica and replica_index(pod, gang) == job_index
                and completion_index(pod, gang) == pod_index):  # fmt: skip
            return pod
    return None


def find_coordinator(
    kind: JobKind, pods: Sequence[Pod], *, types: Mapping[str, str],
    replicas: Sequence[str] = (), declared: DeclaredCoordinator | None = None,
) -> Pod | None:  # fmt: skip
    """The coordinator among `pods` (sorted by name, or by replica, Job index and completion
    index), or None when it has no pod yet. `replicas`: the gang's replicated jobs in the
    object's order (JobSet kinds); `declared`: the coordinator the object names."""
    found = workload(kind)
    gang, rule = found.labels, found.coordinator
    if gang.completion_index is not None:
        return _replicated_coordinator(kind, pods, types=types, replicas=replicas,
                                       declared=declared)  # fmt: skip
    if gang.job_role and gang.coordinator_role:
        for pod in pods:
            if pod.labels.get(gang.job_role) == gang.coordinator_role:
                return pod
    for wanted in rule.replica_types:
        for pod in pods:
            if types[pod.name] == wanted:
                return pod
    if not rule.worker_zero:
        return None
    for pod in pods:
        if types[pod.name] == "worker" and replica_index(pod, gang) == 0:
            return pod
    return None


def is_launcher_gang(kind: JobKind, replicas: Sequence[str]) -> bool:
    """The gang has its kind's launcher beside another replicated job (MPI)."""
    launcher = workload(kind).coordinator.launcher
    return launcher is not None and launcher.replica_type in replicas and len(set(replicas)) > 1


def _replicated_coordinator(
    kind: JobKind, pods: Sequence[Pod], *, types: Mapping[str, str],
    replicas: Sequence[str], declared: DeclaredCoordinator | None,
) -> Pod | None:  # fmt: skip
    found = workload(kind)
    gang, rule = found.labels, found.coordinator
    if is_launcher_gang(kind, replicas):
        wanted = rule.launcher.replica_type if rule.launcher is not None else ""
        return next((p for p in pods if types[p.name] == wanted), None)
    if declared is not None:
        return _rank(pods, types, gang, replica=declared.replica, job_index=declared.job_index,
                     pod_index=declared.pod_index)  # fmt: skip
    for wanted in rule.replica_types:
        if wanted in replicas:
            return _rank(pods, types, gang, replica=wanted)
    if rule.first_replica and replicas:
        return _rank(pods, types, gang, replica=replicas[0])
    return None
