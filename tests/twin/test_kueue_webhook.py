"""Kueue's webhooks and CRD rules on a bare store: suspend on create, defaults, refusals."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agent.twin.apierror import ApiError
from agent.twin.kueue_jobs import BATCH_JOB, JOBSET, KINDS
from agent.twin.kueue_labels import CLUSTER_QUEUES, TOPOLOGIES, WORKLOADS
from agent.twin.kueue_webhook import register, tas_annotation_errors
from agent.twin.patch import PatchType
from agent.twin.store import Store

QUEUED = {"kueue.x-k8s.io/queue-name": "user-queue"}


@pytest.fixture
def store() -> Iterator[Store]:
    store = Store()
    register(store, KINDS)
    yield store
    store.close()


def batch_job(name: str, labels: dict[str, str] | None = None, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "labels": labels or {}, **meta},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}


def test_a_queued_job_is_created_suspended_and_an_unqueued_one_is_not(store: Store) -> None:
    assert store.create(BATCH_JOB.resource, batch_job("q", QUEUED))["spec"]["suspend"] is True
    assert "suspend" not in store.create(BATCH_JOB.resource, batch_job("free"))["spec"]
    child = batch_job("launcher", QUEUED, ownerReferences=[{
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "m", "uid": "u",
        "controller": True}])  # fmt: skip
    assert "suspend" not in store.create(BATCH_JOB.resource, child)["spec"]


def test_the_suspend_default_applies_on_create_only(store: Store) -> None:
    store.create(BATCH_JOB.resource, batch_job("q", QUEUED))
    resumed = store.patch(BATCH_JOB.resource, "q", {"spec": {"suspend": False}},
                          namespace="default", patch_type=PatchType.MERGE)  # fmt: skip
    assert resumed["spec"]["suspend"] is False


def test_workload_and_cluster_queue_defaults(store: Store) -> None:
    created = store.create(WORKLOADS, {"metadata": {"name": "w", "namespace": "default"},
                                       "spec": {"podSets": [{"template": {}}]}})  # fmt: skip
    assert created["spec"]["active"] is True
    assert created["spec"]["podSets"] == [{"name": "main", "count": 1, "template": {}}]
    cleared = store.patch(WORKLOADS, "w", {"spec": {"active": None}}, namespace="default",
                          patch_type=PatchType.MERGE)  # fmt: skip
    assert cleared["spec"]["active"] is True  # the CRD default comes back
    queue = store.create(CLUSTER_QUEUES, {"metadata": {"name": "cq"}, "spec": {}})
    assert queue["spec"] == {"queueingStrategy": "BestEffortFIFO", "stopPolicy": "None"}


def test_topology_levels_never_change(store: Store) -> None:
    store.create(TOPOLOGIES, {"metadata": {"name": "t"},
                              "spec": {"levels": [{"nodeLabel": "kubernetes.io/hostname"}]}})
    with pytest.raises(ApiError) as refused:
        store.patch(TOPOLOGIES, "t", {"spec": {"levels": [{"nodeLabel": "x"}]}},
                    patch_type=PatchType.MERGE)  # fmt: skip
    assert refused.value.code == 422
    assert refused.value.message == (
        'Topology.kueue.x-k8s.io "t" is invalid: spec.levels: Invalid value: "array": field is immutable')


@pytest.mark.parametrize(("annotations", "errors"), [
    ({}, []),
    ({"kueue.x-k8s.io/podset-required-topology": "topology.kubernetes.io/zone",
      "kueue.x-k8s.io/podset-group-name": "llm"}, []),
    ({"kueue.x-k8s.io/podset-required-topology": "not a label"},
     ['t.metadata.annotations[kueue.x-k8s.io/podset-required-topology]: Invalid value: '
      '"not a label": name part must consist of alphanumeric characters, \'-\', \'_\' or \'.\', '
      "and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
      "'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"]),
    ({"kueue.x-k8s.io/podset-unconstrained-topology": "maybe"},
     ['t.metadata.annotations[kueue.x-k8s.io/podset-unconstrained-topology]: Invalid value: '
      '"maybe": must be a boolean value']),
])  # fmt: skip
def test_topology_annotations_are_checked_as_kueue_checks_them(
    annotations: dict[str, str], errors: list[str]
) -> None:
    assert tas_annotation_errors(annotations, "t") == errors


def _rjob(name: str, pods: int, annotations: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "replicas": 1, "template": {"spec": {"parallelism": pods, "template": {
        "metadata": {"annotations": annotations},
        "spec": {"containers": [{"name": "c", "image": "i"}]}}}}}  # fmt: skip


ZONE_GROUP = {"kueue.x-k8s.io/podset-required-topology": "topology.kubernetes.io/zone",
              "kueue.x-k8s.io/podset-group-name": "g"}  # fmt: skip
GROUP_PATH = "spec.replicatedJobs[{}].template.spec.template.metadata.annotations"


@pytest.mark.parametrize(
    ("rjobs", "errors"),
    [
        ([_rjob("driver", 1, ZONE_GROUP), _rjob("workers", 4, ZONE_GROUP)], []),
        ([_rjob("a", 1, ZONE_GROUP), _rjob("b", 2, ZONE_GROUP), _rjob("c", 2, ZONE_GROUP)],
         [f'{GROUP_PATH.format(i)}[kueue.x-k8s.io/podset-group-name]: Invalid value: "g": can '
          "only define groups of exactly 2 pod sets, got: 3 pod set(s)" for i in range(3)]),
        ([_rjob("a", 2, ZONE_GROUP), _rjob("b", 2, ZONE_GROUP)],
         [f'{GROUP_PATH.format(i)}[kueue.x-k8s.io/podset-group-name]: Invalid value: "g": can '
          "only define groups where at least one pod set has only 1 replica, got: 2 replica(s) "
          "and 2 replica(s) in the group" for i in range(2)]),
        ([_rjob("a", 1, ZONE_GROUP),
          _rjob("b", 4, {**ZONE_GROUP, "kueue.x-k8s.io/podset-required-topology": "kubernetes.io/hostname"})],
         [f"{GROUP_PATH.format(a)}: Invalid value: must specify "
          "'kueue.x-k8s.io/podset-required-topology' or 'kueue.x-k8s.io/podset-preferred-topology' "
          f"topology consistent with '{GROUP_PATH.format(b)}' in group 'g'" for a, b in ((0, 1), (1, 0))]),
    ],
    ids=["a-pair-with-a-single-pod", "three-in-a-group", "no-single-pod", "different-levels"],
)  # fmt: skip
def test_a_jobsets_podset_groups_are_checked_as_kueue_checks_them(
    store: Store, rjobs: list[dict[str, Any]], errors: list[str]
) -> None:
    jobset = {"metadata": {"name": "js", "namespace": "default", "labels": dict(QUEUED)},
              "spec": {"replicatedJobs": rjobs}}  # fmt: skip
    if not errors:
        assert store.create(JOBSET.resource, jobset)["spec"]["suspend"] is True
        return
    with pytest.raises(ApiError) as refused:
        store.create(JOBSET.resource, jobset)
    assert refused.value.code == 403
    assert refused.value.message == ('admission webhook "vjobset.kb.io" denied the request: '
                                     f"[{', '.join(errors)}]")
