"""Replica types, indexes and the coordinator of a Kubeflow job's pods (training-operator v1).

The labels read and the coordinator rule are the kind's descriptor's (`agent.model.workload`):
the pod whose role label names the coordinator (`training.kubeflow.org/job-role=master`) if any;
else the first replica type of the kind's preference present (PyTorchJob/XGBoostJob/PaddleJob
Master, TFJob Chief then Master, MPIJob the launcher); else Worker 0 (never for an MPIJob).
Called by `agent.topology.jobs`. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from agent.model.cluster import Pod
from agent.model.workload import KUBEFLOW_LABELS, GangLabels, JobKind, workload
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


def replica_index(pod: Pod, gang: GangLabels = KUBEFLOW_LABELS) -> int | None:
    value = pod.labels.get(gang.replica_index)
    if value is not None:
        try:
            return parse_int(value, field=gang.replica_index, maximum=MAX_REPLICA_INDEX)
        except NumberError:
            pass  # not an index (e.g. "²"): fall back to the pod name
    match = _NAME_TAIL.search(pod.name)
    return int(match.group(2)) if match else None


def find_coordinator(kind: JobKind, pods: Sequence[Pod], *, types: Mapping[str, str]) -> Pod | None:
    """The coordinator among `pods` (sorted by name), or None when it has no pod yet."""
    found = workload(kind)
    gang, rule = found.labels, found.coordinator
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
