"""Target-zone choice (ties) and the reasons that make a job not remediable."""

from __future__ import annotations

from typing import Any

import pytest

from agent.diagnosis.placement import blocking_reasons, choose_target_zone
from agent.settings import GroupSpec
from agent.topology.jobs import find_jobs
from tests.support.objects import (
    job_pod,
    jobset,
    jobset_pod,
    node,
    pod,
    replicated_job,
    training_job,
    trainjob,
)
from tests.support.snapshots import load


@pytest.mark.parametrize(
    ("candidates", "job_gpus", "free", "expected"),
    [
        (
            ["zone-a", "zone-b"],
            {"zone-a": 3, "zone-b": 1},
            {"zone-a": 1, "zone-b": 9},
            "zone-a",
        ),  # most job GPUs
        (
            ["zone-a", "zone-b"],
            {"zone-a": 2, "zone-b": 2},
            {"zone-a": 16, "zone-b": 6},
            "zone-a",
        ),  # tie: most free
        (["zone-a", "zone-b"], {"zone-a": 2, "zone-b": 2}, {"zone-a": 4, "zone-b": 6}, "zone-b"),
        (
            ["zone-b", "zone-a"],
            {"zone-a": 2, "zone-b": 2},
            {"zone-a": 6, "zone-b": 6},
            "zone-a",
        ),  # tie: name
        (["zone-c"], {"zone-a": 4}, {"zone-c": 8}, "zone-c"),  # holding none of the job is fine
        ([], {"zone-a": 4}, {"zone-a": 8}, None),
    ],
)
def test_choose_target_zone(
    candidates: list[str], job_gpus: dict[str, int], free: dict[str, int], expected: str | None
) -> None:
    assert choose_target_zone(candidates, job_gpus=job_gpus, free_gpus=free) == expected


N = [node("a1", "zone-a", gpus=8)]
POD = job_pod("PyTorchJob", "j", "master", 0, node_name="a1")
GROUP = GroupSpec(name="g", selector={"app": "g"}, coordinator={"role": "c"}, workers={"role": "w"})


def _reasons(
    items: list[dict[str, Any]], *, protected: tuple[str, ...] = ("kube-system",)
) -> list[str]:
    (job,) = find_jobs(load(N + items).state, [GROUP])
    return blocking_reasons(job, protected_namespaces=protected)


TRAINJOB_PODS = [jobset_pod("t", "node", 0, i, node_name="a1", gpus=1) for i in range(2)]


@pytest.mark.parametrize(
    ("items", "protected", "expected"),
    [
        ([POD], ("kube-system",), []),
        (
            [POD, training_job("PyTorchJob", "j", labels={"kueue.x-k8s.io/queue-name": "q"})],
            (),
            ["Kueue-managed (queue q)"],
        ),
        (
            [
                POD,
                training_job(
                    "PyTorchJob", "j", run_policy={"managedBy": "kueue.x-k8s.io/multikueue"}
                ),
            ],
            (),
            ["managed by kueue.x-k8s.io/multikueue"],
        ),
        (
            [
                POD,
                training_job("MPIJob", "j", run_policy={"managedBy": "kubeflow.org/mpi-operator"}),
            ],
            (),
            [],
        ),
        ([POD], ("ml",), ["namespace ml is protected"]),
        # a TrainJob (its pods its JobSet's) and a JobSet of their own: Kueue's, or finished
        ([*TRAINJOB_PODS, trainjob("t", labels={"kueue.x-k8s.io/queue-name": "q"}),
          jobset("t", [replicated_job("node", nodes=2)], trainjob=True)], (),
         ["Kueue-managed (queue q)"]),
        ([*TRAINJOB_PODS, trainjob("t", managed_by="kueue.x-k8s.io/multikueue")], (),
         ["managed by kueue.x-k8s.io/multikueue"]),
        ([*TRAINJOB_PODS, trainjob("t", managed_by="trainer.kubeflow.org/trainjob-controller")], (), []),
        ([*TRAINJOB_PODS, trainjob("t", conditions=["Complete"])], (), ["TrainJob has finished"]),
        ([*TRAINJOB_PODS, jobset("t", [replicated_job("node", nodes=2)], managed_by="kueue.x-k8s.io/multikueue")],
         (), ["managed by kueue.x-k8s.io/multikueue"]),
        ([*TRAINJOB_PODS, jobset("t", [replicated_job("node", nodes=2)], conditions=["Completed"])],
         (), ["JobSet has finished"]),
        (
            [POD, training_job("PyTorchJob", "j", conditions=["Succeeded"])],
            (),
            ["PyTorchJob has finished"],
        ),
        (
            [pod("c", node_name="a1", labels={"app": "g", "role": "c"})],
            (),
            ["pod c has no controller"],
        ),
        (
            [
                pod(
                    "c",
                    node_name="a1",
                    labels={"app": "g", "role": "c"},
                    owner=("v1", "ReplicationController", "rc"),
                )
            ],
            (),
            ["pod c is owned by a ReplicationController"],
        ),
        (
            [
                pod(
                    "c",
                    node_name="a1",
                    labels={"app": "g", "role": "c"},
                    owner=("apps/v1", "ReplicaSet", "rs"),
                ),
                pod(
                    "w",
                    node_name="a1",
                    labels={"app": "g", "role": "w"},
                    owner=("batch/v1", "Job", "b"),
                ),
            ],
            (),
            [],
        ),
    ],
)
def test_blocking_reasons(
    items: list[dict[str, Any]], protected: tuple[str, ...], expected: list[str]
) -> None:
    reasons = _reasons(items, protected=protected)
    assert len(reasons) == len(expected)
    for reason, start in zip(reasons, expected, strict=True):
        assert reason.startswith(start)
