"""Finding jobs from pods: labels, owner references, operator names, mpi-operator v2beta1, groups."""

from __future__ import annotations

from typing import Any

import pytest

from agent.model.workload import JobKind
from agent.settings import GroupSpec
from agent.topology.jobs import find_jobs
from tests.support.objects import JOB_NAME, JOB_ROLE, OPERATOR, job_pod, node, pod, training_job
from tests.support.snapshots import load

N = [node("a1", "zone-a", gpus=8), node("b1", "zone-b", gpus=8)]


def _found(
    items: list[dict[str, Any]], groups: tuple[GroupSpec, ...] = ()
) -> dict[str, tuple[str, ...]]:
    jobs = find_jobs(load(N + items).state, groups)
    return {str(j.ref): tuple(p.name for p in j.pods) for j in jobs}


def _v2_launcher(job: str) -> dict[str, Any]:
    return pod(
        f"{job}-launcher-x7k2p",
        node_name="a1",
        labels={JOB_NAME: job, JOB_ROLE: "launcher", OPERATOR: "mpi-operator"},
        owner=("batch/v1", "Job", f"{job}-launcher"),
    )


def _v2_worker(job: str, i: int) -> dict[str, Any]:
    return pod(
        f"{job}-worker-{i}",
        node_name="b1",
        gpus=1,
        labels={
            JOB_NAME: job,
            JOB_ROLE: "worker",
            OPERATOR: "mpi-operator",
            "training.kubeflow.org/replica-index": str(i),
        },
        owner=("kubeflow.org/v2beta1", "MPIJob", job),
    )


LAUNCHER_JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {
        "name": "mpi-launcher",
        "namespace": "ml",
        "ownerReferences": [
            {
                "apiVersion": "kubeflow.org/v2beta1",
                "kind": "MPIJob",
                "name": "mpi",
                "uid": "u",
                "controller": True,
            }
        ],
    },
}


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        # label + owner reference, pods ordered by replica type then index
        (
            [
                job_pod("PyTorchJob", "j", "worker", 1, node_name="a1"),
                job_pod("PyTorchJob", "j", "master", 0, node_name="a1"),
                job_pod("PyTorchJob", "j", "worker", 0, node_name="a1"),
            ],
            {"PyTorchJob/ml/j": ("j-master-0", "j-worker-0", "j-worker-1")},
        ),
        # operator-name label alone (no owner reference)
        (
            [
                pod(
                    "t-chief-0",
                    node_name="a1",
                    labels={JOB_NAME: "t", OPERATOR: "tfjob-controller"},
                )
            ],
            {"TFJob/ml/t": ("t-chief-0",)},
        ),
        # job-name label alone: the kind comes from the job object
        (
            [
                pod("x-master-0", node_name="a1", labels={JOB_NAME: "x"}),
                training_job("XGBoostJob", "x"),
            ],
            {"XGBoostJob/ml/x": ("x-master-0",)},
        ),
        # job-name label with nothing to tell the kind: not a job
        ([pod("y-master-0", node_name="a1", labels={JOB_NAME: "y"})], {}),
        # owner reference alone (no labels)
        (
            [pod("p-worker-0", node_name="a1", owner=("kubeflow.org/v1", "PaddleJob", "p"))],
            {"PaddleJob/ml/p": ("p-worker-0",)},
        ),
        # mpi-operator v2beta1: launcher owned by batch Job <job>-launcher owned by the MPIJob
        (
            [_v2_launcher("mpi"), _v2_worker("mpi", 0), _v2_worker("mpi", 1), LAUNCHER_JOB],
            {"MPIJob/ml/mpi": ("mpi-launcher-x7k2p", "mpi-worker-0", "mpi-worker-1")},
        ),
        # ... also when the batch Job is missing from the snapshot (name convention)
        (
            [
                pod(
                    "m-launcher-abc",
                    node_name="a1",
                    labels={JOB_NAME: "m"},
                    owner=("batch/v1", "Job", "m-launcher"),
                ),
                _v2_worker("m", 0),
            ],
            {"MPIJob/ml/m": ("m-launcher-abc", "m-worker-0")},
        ),
        # finished pods are dropped; a job with only finished pods yields nothing
        (
            [
                job_pod("PyTorchJob", "done", "master", 0, node_name="a1", phase="Succeeded"),
                job_pod("PyTorchJob", "half", "master", 0, node_name="a1", phase="Failed"),
                job_pod("PyTorchJob", "half", "worker", 0, node_name="a1"),
            ],
            {"PyTorchJob/ml/half": ("half-worker-0",)},
        ),
        # a job object with no pods yields nothing; plain pods are not jobs
        (
            [
                training_job("PyTorchJob", "ghost"),
                pod("nginx", node_name="a1", labels={"app": "nginx"}),
            ],
            {},
        ),
        # same name in two namespaces: two jobs
        (
            [
                job_pod("TFJob", "t", "chief", 0, node_name="a1"),
                job_pod("TFJob", "t", "chief", 0, node_name="a1", ns="other"),
            ],
            {"TFJob/ml/t": ("t-chief-0",), "TFJob/other/t": ("t-chief-0",)},
        ),
    ],
)
def test_kubeflow_jobs(items: list[dict[str, Any]], expected: dict[str, tuple[str, ...]]) -> None:
    assert _found(items) == expected


def test_job_object_adds_run_policy_and_labels() -> None:
    jobs = find_jobs(
        load(
            [
                *N,
                job_pod("PyTorchJob", "j", "master", 0, node_name="a1"),
                training_job(
                    "PyTorchJob",
                    "j",
                    labels={"kueue.x-k8s.io/queue-name": "q"},
                    run_policy={"suspend": False, "managedBy": "kubeflow.org/training-operator"},
                ),
            ]
        ).state
    )
    assert jobs[0].obj is not None
    assert jobs[0].obj.labels["kueue.x-k8s.io/queue-name"] == "q"
    assert jobs[0].obj.managed_by == "kubeflow.org/training-operator"


GROUP = GroupSpec(
    name="llm",
    namespace=None,
    selector={"app": "llm"},
    coordinator={"role": "coord"},
    workers={"role": "worker"},
    ports=[29500],
)


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        (
            [
                pod("w2", node_name="a1", labels={"app": "llm", "role": "worker"}),
                pod("c", node_name="b1", labels={"app": "llm", "role": "coord"}),
                pod("w1", node_name="a1", labels={"app": "llm", "role": "worker"}),
                pod("side", node_name="a1", labels={"app": "llm", "role": "sidecar"}),
                pod("other", node_name="a1", labels={"app": "web", "role": "worker"}),
            ],
            {"Group/ml/llm": ("c", "w1", "w2")},
        ),
        # no namespace in the spec: one group per namespace
        (
            [
                pod("c", node_name="b1", labels={"app": "llm", "role": "coord"}),
                pod("c", ns="lab", node_name="b1", labels={"app": "llm", "role": "coord"}),
            ],
            {"Group/lab/llm": ("c",), "Group/ml/llm": ("c",)},
        ),
        # finished pods do not count
        ([pod("c", node_name="b1", phase="Succeeded", labels={"app": "llm", "role": "coord"})], {}),
    ],
)
def test_groups(items: list[dict[str, Any]], expected: dict[str, tuple[str, ...]]) -> None:
    assert _found(items, (GROUP,)) == expected


def test_group_namespace_filter_and_coordinator() -> None:
    spec = GroupSpec(
        name="llm",
        namespace="lab",
        selector={"app": "llm"},
        coordinator={"role": "coord"},
        workers={"role": "worker"},
    )
    jobs = find_jobs(
        load(
            [
                *N,
                pod("c", ns="lab", node_name="b1", labels={"app": "llm", "role": "coord"}),
                pod("w", ns="lab", node_name="a1", labels={"app": "llm", "role": "worker"}),
                pod("c", node_name="b1", labels={"app": "llm", "role": "coord"}),
            ]
        ).state,
        [spec],
    )
    assert [(str(j.ref), j.coordinator.name if j.coordinator else None) for j in jobs] == [
        ("Group/lab/llm", "c")
    ]
    assert jobs[0].ref.kind is JobKind.GROUP
