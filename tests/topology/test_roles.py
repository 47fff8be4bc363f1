"""Coordinator choice per kind (Kubeflow training-operator v1): `job-role=master` if labelled;
else PyTorchJob/XGBoostJob/PaddleJob Master, TFJob Chief then Master, MPIJob the launcher, else
Worker 0."""

from __future__ import annotations

import pytest

from agent.model.cluster import Pod
from agent.model.workload import KUBEFLOW_LABELS
from agent.topology.jobs import find_jobs
from agent.topology.roles import replica_index
from tests.support.objects import JOB_NAME, JOB_ROLE, OPERATOR, job_pod, node, pod
from tests.support.snapshots import load

N = [node("a1", "zone-a", gpus=8)]


@pytest.mark.parametrize(
    ("kind", "replicas", "role_label_on", "coordinator"),
    [
        ("PyTorchJob", [("master", 0), ("worker", 0), ("worker", 1)], None, "j-master-0"),
        ("PyTorchJob", [("worker", 1), ("worker", 0)], None, "j-worker-0"),  # no Master: Worker 0
        ("TFJob", [("ps", 0), ("worker", 0), ("chief", 0), ("master", 0)], None, "j-chief-0"),
        ("TFJob", [("ps", 0), ("worker", 0), ("master", 0)], None, "j-master-0"),
        ("TFJob", [("ps", 0), ("worker", 1), ("worker", 0), ("evaluator", 0)], None, "j-worker-0"),
        ("MPIJob", [("worker", 0), ("launcher", 0)], None, "j-launcher-0"),
        ("MPIJob", [("worker", 0), ("worker", 1)], None, None),  # launcher not created yet
        ("XGBoostJob", [("worker", 0), ("master", 0)], None, "j-master-0"),
        ("PaddleJob", [("worker", 0), ("worker", 1)], None, "j-worker-0"),
        ("JAXJob", [("worker", 1), ("worker", 0)], None, "j-worker-0"),
        # the job-role=master label wins over the kind's rule
        ("PyTorchJob", [("worker", 0), ("worker", 1)], ("worker", 1), "j-worker-1"),
    ],
)
def test_coordinator(
    kind: str,
    replicas: list[tuple[str, int]],
    role_label_on: tuple[str, int] | None,
    coordinator: str | None,
) -> None:
    items = [
        job_pod(kind, "j", t, i, node_name="a1", coordinator=(t, i) == role_label_on)
        for t, i in replicas
    ]
    (job,) = find_jobs(load(N + items).state)
    assert (job.coordinator.name if job.coordinator else None) == coordinator


def test_replica_type_from_v2beta1_role_and_name() -> None:
    items = [
        pod(
            "m-launcher-abc",
            node_name="a1",
            labels={JOB_NAME: "m", JOB_ROLE: "launcher", OPERATOR: "mpi-operator"},
        ),
        pod(
            "m-worker-3",
            node_name="a1",
            labels={JOB_NAME: "m", JOB_ROLE: "worker", OPERATOR: "mpi-operator"},
        ),
    ]
    (job,) = find_jobs(load(N + items).state)
    assert dict(job.replica_types) == {"m-launcher-abc": "launcher", "m-worker-3": "worker"}
    assert job.coordinator is not None and job.coordinator.name == "m-launcher-abc"


@pytest.mark.parametrize(
    ("name", "index_label", "expected"),
    [
        ("j-worker-3", "3", 3),
        ("j-worker-3", None, 3),  # from the name
        ("j-worker-3", "²", 3),  # "²".isdigit() is True but it is no index: the name decides
        ("j-worker-3", "٨", 3),  # Arabic-Indic eight: not an ASCII digit
        ("j-worker-3", "9" * 40, 3),  # beyond 64 bits
        ("j-worker-3", "-1", 3),
        ("j-worker-" + "9" * 5000, None, None),  # int() of 5,000 digits would raise
        ("j-worker-٣", None, None),
    ],
)
def test_replica_index_reads_ascii_digits_only(
    name: str, index_label: str | None, expected: int | None
) -> None:
    labels = {KUBEFLOW_LABELS.replica_index: index_label} if index_label is not None else {}
    assert replica_index(Pod(namespace="ml", name=name, labels=labels)) == expected
