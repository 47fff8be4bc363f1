"""The Kueue plan of a JobSet and of a TrainJob: the request written where the kind keeps its pod
templates (the JobSet's replicated jobs; zonemedic's own `runtimePatches` entry of a TrainJob),
never a suspend or a nodeSelector, and each refusal of the Trainer family said before anything is
written. Table-driven over hand-built objects as the API returns them."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from agent.model.cluster import ZONE_LABEL
from agent.model.kueue import ClusterQueue, FlavorQuota, KueueAdvice, KueueCause, KueueObjects
from agent.model.workload import KUEUE, TRAINJOB_PATCH_MANAGER, JobKind
from agent.remediation import jobset_patch
from agent.remediation.kueue_plan import plan_kueue
from agent.remediation.plan import LiveObjects, Plan, TargetAction
from agent.remediation.template import PlanRefusedError, TemplateState
from agent.remediation.trainer_release import OverrideField, TrainerOverrides
from tests.remediation.builders import cluster_nodes, finding

ADVICE = KueueAdvice(cause=KueueCause.NO_REQUEST, queue="user-queue", message="no request",
                     proposal="", cluster_queue="cq", workload="wl", flavor="gpu",
                     agent_fixable=True)  # fmt: skip
INJECTED = {KUEUE.unconstrained_annotation: "true", "kueue.x-k8s.io/workload": "wl"}
V23 = TrainerOverrides(OverrideField.RUNTIME_PATCHES, resume_with_patch=True)


def rjob(name: str, *, pods: int, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"name": name, "replicas": 1, "template": {"spec": {
        "parallelism": pods, "completions": pods, "template": {
            "metadata": {"annotations": dict(annotations or {})},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}}}}  # fmt: skip


def jobset(*rjobs: dict[str, Any], owner: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "train", "namespace": "ml", "uid": "uid-js", "resourceVersion": "5",
                            "labels": {KUEUE.queue_label: "user-queue"}}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                                    "name": owner, "uid": "uid-tj", "controller": True}]
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta,
            "spec": {"suspend": False, "replicatedJobs": list(rjobs)}}  # fmt: skip


def trainjob(patches: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "train", "namespace": "ml", "uid": "uid-tj", "resourceVersion": "9",
                         "labels": {KUEUE.queue_label: "user-queue"}},
            "spec": {"runtimeRef": {"name": "torch"}, "suspend": False,
                     "runtimePatches": patches if patches is not None else [
                         {"manager": "kueue.x-k8s.io/manager",
                          "trainingRuntimeSpec": {"template": {"spec": {}}}}]}}  # fmt: skip


def workload(*pod_sets: tuple[str, int, dict[str, str]], kind: str = "JobSet") -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
            "metadata": {"name": "wl", "namespace": "ml", "uid": "uid-wl", "resourceVersion": "7",
                         "ownerReferences": [{"kind": kind, "name": "train", "controller": True}]},
            "spec": {"active": True, "queueName": "user-queue", "podSets": [
                {"name": n, "count": c, "template": {"metadata": {"annotations": dict(a)}}}
                for n, c, a in pod_sets]},
            "status": {"conditions": [{"type": "Admitted", "status": "True"}],
                       "admission": {"clusterQueue": "cq"}}}  # fmt: skip


def objects() -> KueueObjects:
    return KueueObjects(cluster_queues={"cq": ClusterQueue(
        "cq", ("gpu",), (FlavorQuota("gpu", "nvidia.com/gpu", 16, 4),))})


def plan(kind: JobKind, job: dict[str, Any], wl: dict[str, Any], **live: Any) -> Plan:
    found = replace(finding(kind, target=None, remediable=False), kueue=ADVICE)
    objs = LiveObjects(job=job, pods=[], nodes=cluster_nodes(), bound_pods=[], **live)
    return plan_kueue(found, objs, workload_obj=wl, kueue=objects(), allowed=("zone-a",),
                      zone="zone-a", need=4)  # fmt: skip


JOBSET_ONE = jobset(rjob("workers", pods=4, annotations=INJECTED))
WL_ONE = workload(("workers", 4, {}))


def test_a_jobset_gets_the_request_on_its_replicated_jobs_templates() -> None:
    made = plan(JobKind.JOBSET, JOBSET_ONE, WL_ONE)
    requeue, annotate = made.targets
    assert (requeue.action, annotate.action) == (TargetAction.REQUEUE, TargetAction.ANNOTATE)
    assert annotate.override is not None and annotate.override["field"] == "replicatedJobs"
    patch = jobset_patch.forward_patch(annotate, JOBSET_ONE, suspend=None)
    assert set(patch["spec"]) == {"replicatedJobs"}  # no suspend: Kueue owns it
    template = patch["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert template["metadata"]["annotations"][KUEUE.topology_annotation] == ZONE_LABEL
    assert KUEUE.group_annotation not in template["metadata"]["annotations"]  # one PodSet
    assert "nodeSelector" not in template["spec"]
    assert jobset_patch.override_state(annotate, JOBSET_ONE) is TemplateState.ORIGINAL
    applied = copy.deepcopy(JOBSET_ONE)
    applied["spec"]["replicatedJobs"] = patch["spec"]["replicatedJobs"]
    assert jobset_patch.override_state(annotate, applied) is TemplateState.PLANNED
    restored = jobset_patch.restore_patch(annotate, applied, suspend=None)
    back = restored["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]
    assert KUEUE.topology_annotation not in back["annotations"]
    assert "annotate its replicated jobs' pod templates for Kueue" in made.diff
    assert Plan.from_dict(made.to_dict()) == made


def test_a_trainjob_gets_its_own_runtime_patch_entry_beside_kueues() -> None:
    js = jobset(rjob("node", pods=4, annotations=INJECTED), owner="train")
    made = plan(JobKind.TRAINJOB, trainjob(), workload(("node", 4, {}), kind="TrainJob"),
                materialised=js, trainer=V23)  # fmt: skip
    annotate = made.targets[1]
    assert annotate.override is not None and annotate.override["manager"] == TRAINJOB_PATCH_MANAGER
    patch = jobset_patch.forward_patch(annotate, trainjob(), suspend=None)
    assert set(patch["spec"]) == {"runtimePatches"}
    kueues, ours = patch["spec"]["runtimePatches"]
    assert kueues["manager"] == "kueue.x-k8s.io/manager"  # sent back unchanged
    assert ours == {"manager": TRAINJOB_PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"metadata": {
            "annotations": {KUEUE.topology_annotation: ZONE_LABEL}}}}}}]}}}}  # fmt: skip
    assert "own runtimePatches entry (manager zonemedic.io/remediation)" in made.diff
    assert jobset_patch.restore_patch(annotate, {"spec": patch["spec"]}, suspend=None) == {
        "spec": {"runtimePatches": [kueues]}}


@pytest.mark.parametrize(
    ("kind", "job", "wl", "live", "reason"),
    [
        (JobKind.TRAINJOB, trainjob(), workload(("node", 4, {}), kind="TrainJob"),
         {"materialised": jobset(rjob("node", pods=4), owner="train"),
          "trainer": TrainerOverrides(OverrideField.POD_TEMPLATE_OVERRIDES)},
         "need runtimePatches \\(Trainer v2.2\\+\\)"),
        (JobKind.TRAINJOB, trainjob(), workload(("node", 4, {}), kind="TrainJob"),
         {"materialised": None, "trainer": V23}, "does not exist yet"),
        (JobKind.TRAINJOB, trainjob(),
         workload(("node", 4, {KUEUE.preferred_annotation: "kubernetes.io/hostname"}), kind="TrainJob"),
         {"materialised": jobset(rjob("node", pods=4), owner="train"), "trainer": V23},
         "a runtime patch cannot remove"),
        (JobKind.JOBSET, jobset(rjob("workers", pods=4), owner="trainer-x"), WL_ONE, {},
         "owned by TrainJob ml/trainer-x"),
        (JobKind.JOBSET, jobset(rjob("a", pods=2), rjob("b", pods=2)),
         workload(("a", 2, {}), ("b", 2, {})), {}, "groups two PodSets only when one is a single pod"),
    ],
    ids=["trainer-without-runtime-patches", "trainjob-without-its-jobset",
         "runtime-sets-a-preferred-level", "jobset-owned-by-a-trainjob", "two-multi-pod-podsets"],
)  # fmt: skip
def test_refused_before_anything_is_written(kind: JobKind, job: dict[str, Any], wl: dict[str, Any],
                                            live: dict[str, Any], reason: str) -> None:  # fmt: skip
    with pytest.raises(PlanRefusedError, match=reason):
        plan(kind, job, wl, **live)
