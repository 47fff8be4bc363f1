"""The guards before a remediation starts, table-driven: protected namespaces, Kueue, one in
flight per job, the hourly cap."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from agent.remediation.guard import ClearanceKind, GuardInput, clear, kueue_reason
from tests.support import objects

PROTECTED = ("kube-system", "kube-public")


def _workload(labels: Mapping[str, str] | None = None, *, managed_by: str | None = None,
              kind: str = "PyTorchJob", annotations: Mapping[str, str] | None = None
              ) -> dict[str, Any]:
    """The workload `resnet` of `kind` (a Kubeflow kind, or a batch `Job`)."""
    if kind == "Job":
        job = objects.batch_job("resnet", labels=labels, managed_by=managed_by,
                                template={"spec": {"containers": [objects.container()]}})
        if annotations:
            job["metadata"]["annotations"] = dict(annotations)
        return job
    run_policy = {"managedBy": managed_by} if managed_by is not None else None
    return objects.training_job(kind, "resnet", labels=dict(labels or {}), annotations=annotations,
                                run_policy=run_policy)


def _input(objects: Sequence[Mapping[str, Any]] = (), *, namespace: str = "ml", busy: bool = False,
           started: int = 0) -> GuardInput:
    return GuardInput(namespace=namespace, job=f"PyTorchJob {namespace}/resnet", objects=objects,
                      busy=busy, started_last_hour=started)


@pytest.mark.parametrize(
    ("guard", "cap", "kind", "words"),
    [
        (_input(), 5, ClearanceKind.GO, ""),
        (_input([_workload({"team": "vision"}), objects.pod("resnet-worker-0", labels={"app": "x"})], started=4), 5, ClearanceKind.GO, ""),
        (_input([_workload(managed_by="kubeflow.org/training-operator")]), 5, ClearanceKind.GO, ""),
        (_input([_workload(kind="Job", managed_by="kubernetes.io/job-controller")]), 5,
         ClearanceKind.GO, ""),
        (_input(namespace="kube-system"), 5, ClearanceKind.REFUSE,
         "in the protected namespace kube-system"),
        # protected wins over everything else
        (_input(namespace="kube-public", busy=True, started=99), 5, ClearanceKind.REFUSE,
         "protected namespace kube-public"),
        (_input([_workload({"kueue.x-k8s.io/queue-name": "gpu-queue"})]), 5, ClearanceKind.REFUSE,
         "queued by Kueue (label kueue.x-k8s.io/queue-name=gpu-queue)"),
        (_input([_workload(annotations={"kueue.x-k8s.io/queue-name": "q"})]), 5, ClearanceKind.REFUSE,
         "annotation kueue.x-k8s.io/queue-name=q"),
        (_input([_workload(), objects.pod("resnet-worker-0", labels={"kueue.x-k8s.io/managed": "true"})]), 5, ClearanceKind.REFUSE,
         "Pod resnet-worker-0 is managed by Kueue"),
        (_input([_workload(managed_by="kueue.x-k8s.io/multikueue")]), 5, ClearanceKind.REFUSE,
         "managed by kueue.x-k8s.io/multikueue"),
        (_input([_workload(kind="Job", managed_by="kueue.x-k8s.io/multikueue")]), 5,
         ClearanceKind.REFUSE, "Job resnet is managed by kueue.x-k8s.io/multikueue"),
        # TrainJobs and JobSets: Kueue's queue label, or a managedBy other than their controller's
        (_input([objects.trainjob("resnet", labels={"kueue.x-k8s.io/queue-name": "gpu"})]), 5,
         ClearanceKind.REFUSE, "TrainJob resnet is queued by Kueue (label kueue.x-k8s.io/queue-name=gpu)"),
        (_input([objects.trainjob("resnet", managed_by="kueue.x-k8s.io/multikueue")]), 5,
         ClearanceKind.REFUSE, "TrainJob resnet is managed by kueue.x-k8s.io/multikueue"),
        (_input([objects.trainjob("resnet", managed_by="trainer.kubeflow.org/trainjob-controller")]), 5,
         ClearanceKind.GO, ""),
        (_input([objects.jobset("resnet", [], labels={"kueue.x-k8s.io/queue-name": "q"})]), 5,
         ClearanceKind.REFUSE, "JobSet resnet is queued by Kueue"),
        (_input([objects.jobset("resnet", [], managed_by="kueue.x-k8s.io/multikueue")]), 5,
         ClearanceKind.REFUSE, "JobSet resnet is managed by kueue.x-k8s.io/multikueue"),
        (_input([objects.jobset("resnet", [], managed_by="jobset.sigs.k8s.io/jobset-controller")]), 5,
         ClearanceKind.GO, ""),
        (_input(busy=True), 5, ClearanceKind.WAIT, "another remediation of PyTorchJob ml/resnet"),
        (_input(started=5), 5, ClearanceKind.WAIT, "5 remediation(s) started in the last hour; "
         "the cap is 5"),
        (_input(started=0), 0, ClearanceKind.WAIT, "the cap is 0"),
        (_input(started=6), 5, ClearanceKind.WAIT, "the cap is 5"),
    ],
)
def test_clear(guard: GuardInput, cap: int, kind: ClearanceKind, words: str) -> None:
    clearance = clear(guard, protected_namespaces=PROTECTED, max_per_hour=cap)
    assert clearance.kind is kind
    assert words in clearance.reason
    assert (clearance.reason == "") is (kind is ClearanceKind.GO)


@pytest.mark.parametrize(
    "objects",
    [
        [],
        [{"kind": "PyTorchJob"}],  # no metadata at all
        [{"metadata": {"labels": None, "annotations": "junk"}, "spec": {"runPolicy": "x"}}],
        [objects.pod("resnet-worker-0", labels={"kueue.x-k8s.io/managed": "false"})],
    ],
)
def test_not_kueue(objects: list[dict[str, Any]]) -> None:
    assert kueue_reason(objects) is None
