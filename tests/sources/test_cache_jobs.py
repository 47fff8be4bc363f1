"""The cache's look-ups of one job: its object (kubeflow.org/v1, else mpi-operator's v2beta1), uid,
labels, and the GPUs its live pods request (request, else limit; finished pods and unreadable
quantities count nothing)."""

from __future__ import annotations

from typing import Any

import pytest

from agent.model.job import JobRef
from agent.model.workload import JobKind
from agent.sources.cache import ClusterCache
from agent.sources.resources import RESOURCES
from tests.support import objects
from tests.support.objects import JOB_NAME

R = {r.name: r for r in RESOURCES}
RESNET = JobRef(JobKind.PYTORCH, "ml", "resnet")
MPI = JobRef(JobKind.MPI, "ml", "allreduce")


def resnet_pod(name: str, *, phase: str | None = "Running", **resources: dict[str, Any]) -> dict[str, Any]:
    """A pod of the PyTorchJob `resnet` with one container per `resources` (as given, unparsed)."""
    return objects.pod(name, labels={JOB_NAME: "resnet"}, node_name="n1", phase=phase, kind=False,
                       owner_refs=[{"kind": "PyTorchJob", "name": "resnet", "controller": True}],
                       containers=[{"name": f"c{i}", "resources": r} for i, r in enumerate(resources.values())])


@pytest.mark.parametrize(
    ("objects", "key", "uid", "labels"),
    [
        ({"pytorchjobs.v1.kubeflow.org": [objects.training_job("PyTorchJob", "resnet", uid="u-1", labels={"team": "llm"})]}, RESNET, "u-1", {"team": "llm"}),
        ({"pytorchjobs.v1.kubeflow.org": [objects.training_job("PyTorchJob", "resnet")]}, RESNET, None, {}),  # no uid, no labels
        ({"pytorchjobs.v1.kubeflow.org": [objects.training_job("PyTorchJob", "resnet", uid="", labels={"n": 1})]}, RESNET, None, {"n": "1"}),
        ({"pytorchjobs.v1.kubeflow.org": [objects.training_job("PyTorchJob", "other", uid="u-2")]}, RESNET, None, {}),  # not cached
        ({"mpijobs.v2beta1.kubeflow.org": [objects.training_job("MPIJob", "allreduce", uid="u-3", labels={"a": "b"})]}, MPI, "u-3", {"a": "b"}),
        ({"mpijobs.v1.kubeflow.org": [objects.training_job("MPIJob", "allreduce", uid="v1")],
          "mpijobs.v2beta1.kubeflow.org": [objects.training_job("MPIJob", "allreduce", uid="v2")]}, MPI, "v1", {}),  # v1 first
    ],
)
def test_job_object_uid_and_labels(
    objects: dict[str, list[dict[str, Any]]], key: JobRef, uid: str | None, labels: dict[str, str]
) -> None:
    cache = ClusterCache()
    for resource, items in objects.items():
        cache.replace(R[resource], items)
    assert cache.job_uid(key) == uid
    assert cache.job_labels(key) == labels
    assert (cache.job_object(key) is not None) == any(
        o["metadata"]["name"] == key.name and r.startswith(f"{key.kind.lower()}s.")
        for r, items in objects.items() for o in items
    )


GPU = "nvidia.com/gpu"


@pytest.mark.parametrize(
    ("pods", "gpus"),
    [
        ([], 0),
        ([resnet_pod("w-0", a={"requests": {GPU: "2"}, "limits": {GPU: "2"}})], 2),
        ([resnet_pod("w-0", a={"limits": {GPU: "4"}})], 4),  # extended resources: requests default to limits
        ([resnet_pod("w-0", a={"requests": {GPU: "1"}}, b={"limits": {GPU: 2}})], 3),  # every container
        ([resnet_pod("w-0", a={"requests": {GPU: "1"}}), resnet_pod("w-1", a={"requests": {GPU: "1"}})], 2),
        ([resnet_pod("w-0", phase="Succeeded", a={"requests": {GPU: "8"}}), resnet_pod("w-1", a={"requests": {GPU: "1"}})], 1),
        ([resnet_pod("w-0", phase="Failed", a={"requests": {GPU: "8"}})], 0),
        ([resnet_pod("w-0", phase=None, a={"requests": {GPU: "1"}})], 1),  # no status yet: pending, live
        ([resnet_pod("w-0", a={"requests": {GPU: "lots"}}), resnet_pod("w-1", a={"requests": {GPU: "1"}})], 1),
        ([resnet_pod("w-0", a={"requests": {"cpu": "4"}})], 0),
        # hostile quantities count nothing: non-ASCII digits, negatives, beyond 64 bits
        ([resnet_pod("w-0", a={"requests": {GPU: "٨"}}), resnet_pod("w-1", a={"requests": {GPU: "1"}})], 1),
        ([resnet_pod("w-0", a={"requests": {GPU: "²"}}), resnet_pod("w-1", a={"requests": {GPU: "1"}})], 1),
        ([resnet_pod("w-0", a={"requests": {GPU: "-3"}}), resnet_pod("w-1", a={"requests": {GPU: 1}})], 1),
        ([resnet_pod("w-0", a={"requests": {GPU: -3}}), resnet_pod("w-1", a={"requests": {GPU: "1"}})], 1),
        ([resnet_pod("w-0", a={"requests": {GPU: "9" * 30}}), resnet_pod("w-1", a={"requests": {GPU: "1"}})], 1),
    ],
)
def test_job_gpus(pods: list[dict[str, Any]], gpus: int) -> None:
    cache = ClusterCache()
    cache.replace(R["pods"], pods)
    assert cache.job_gpus(RESNET) == gpus
