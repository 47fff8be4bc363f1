"""The Kueue plan: the Workload re-queued and the templates annotated (before read from the
Workload's PodSets, so Kueue's injected annotations are not taken for the job's own), never a
suspend or a nodeSelector, and every refusal said before anything is written."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from agent.model.cluster import ZONE_LABEL
from agent.model.kueue import (
    ClusterQueue,
    FlavorQuota,
    KueueAdvice,
    KueueCause,
    KueueObjects,
)
from agent.model.workload import KUEUE, JobKind
from agent.remediation.kueue_plan import plan_kueue
from agent.remediation.plan import Plan, TargetAction
from agent.remediation.template import PlanRefusedError, TemplateState
from tests.remediation.builders import finding, job, live

INJECTED = {KUEUE.unconstrained_annotation: "true", "kueue.x-k8s.io/workload": "wl"}
ADVICE = KueueAdvice(cause=KueueCause.NO_REQUEST, queue="user-queue", message="no request",
                     proposal="", cluster_queue="cq", workload="wl", flavor="gpu",
                     agent_fixable=True)  # fmt: skip


def queued_job() -> dict[str, Any]:
    """The lab's PyTorchJob as Kueue runs it: queued, its templates carrying what Kueue injected."""
    obj = job("PyTorchJob", labels={KUEUE.queue_label: "user-queue"})
    for spec in obj["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["metadata"].setdefault("annotations", {}).update(INJECTED)
    return obj


def workload(*, admitted: bool = True, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """The job's Workload: its PodSets' templates as the job's own (no injected annotation)."""
    pod_sets = [{"name": name, "count": 1, "template": {"metadata": {
        "annotations": dict(annotations or {})}}} for name in ("master", "worker")]
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
            "metadata": {"name": "wl", "namespace": "ml", "uid": "uid-wl", "resourceVersion": "7",
                         "ownerReferences": [{"kind": "PyTorchJob", "name": "train",
                                              "controller": True}]},
            "spec": {"active": True, "queueName": "user-queue", "podSets": pod_sets},
            "status": {"conditions": [{"type": "Admitted", "status": "True" if admitted else "False"}],
                       "admission": {"clusterQueue": "cq"}}}  # fmt: skip


def objects(*, nominal: float = 16, reserved: float = 2) -> KueueObjects:
    return KueueObjects(cluster_queues={"cq": ClusterQueue(
        "cq", ("gpu",), (FlavorQuota("gpu", "nvidia.com/gpu", nominal, reserved),))})


def plan(**changes: Any) -> Plan:
    args: dict[str, Any] = {"finding": replace(finding(JobKind.PYTORCH, target=None,
                                                       remediable=False), kueue=ADVICE),
                            "live": live(queued_job()), "workload_obj": workload(),
                            "kueue": objects(), "allowed": ("zone-a",), "zone": "zone-a",
                            "need": 2}  # fmt: skip
    args.update(changes)
    return plan_kueue(args.pop("finding"), args.pop("live"), **args)


def test_the_workload_is_requeued_and_the_templates_annotated() -> None:
    made = plan()
    requeue, annotate = made.targets
    assert (requeue.action, requeue.kind, requeue.name, requeue.uid) == (
        TargetAction.REQUEUE, "Workload", "wl", "uid-wl")
    assert annotate.action is TargetAction.ANNOTATE and made.kueue
    patch = annotate.template_patch()
    for replica in ("Master", "Worker"):
        annotations = patch["spec"]["pytorchReplicaSpecs"][replica]["template"]["metadata"]["annotations"]
        assert annotations == {KUEUE.topology_annotation: ZONE_LABEL,
                               KUEUE.group_annotation: "train"}
    # nothing of suspend or a node selector: Kueue owns both
    assert "runPolicy" not in patch["spec"]
    assert all("spec" not in s["template"] for s in patch["spec"]["pytorchReplicaSpecs"].values())
    # the rollback removes what the plan added (the Workload's templates had none of it)
    restore = annotate.template_patch(restore=True)["spec"]["pytorchReplicaSpecs"]
    assert restore["Master"]["template"]["metadata"]["annotations"] == {
        KUEUE.topology_annotation: None, KUEUE.group_annotation: None}
    assert made.zones == ("zone-a",) and made.target_zone == "zone-a"
    assert "re-queues the job (it may wait for quota)" in made.diff
    assert f"+    {KUEUE.topology_annotation}: {ZONE_LABEL}" in made.diff
    assert Plan.from_dict(made.to_dict()) == made


def test_the_plan_reads_planned_once_the_job_carries_the_annotations() -> None:
    made = plan()
    annotate = made.targets[1]
    obj = queued_job()
    assert annotate.state_of(obj) is TemplateState.ORIGINAL
    for spec in obj["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["metadata"]["annotations"] = {
            KUEUE.topology_annotation: ZONE_LABEL, KUEUE.group_annotation: "train"}
    assert annotate.state_of(obj) is TemplateState.PLANNED


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"workload_obj": None}, "no Kueue Workload"),
        ({"workload_obj": workload(admitted=False)}, "is not admitted"),
        ({"allowed": (), "zone": None}, "no zone where the policies allow every required flow"),
        ({"zone": None}, "has room for the whole job"),
        # others hold more than the nominal quota (borrowed): releasing the job frees too little
        ({"kueue": objects(nominal=8, reserved=12)}, "no room in ClusterQueue cq"),
        ({"kueue": KueueObjects(cluster_queues={"cq": ClusterQueue("cq", ("gpu",))})},
         "has no nvidia.com/gpu quota"),
        ({"finding": replace(finding(JobKind.PYTORCH), kueue=replace(ADVICE, agent_fixable=False))},
         "cannot apply that change itself"),
        ({"finding": finding(JobKind.PYTORCH)}, "not Kueue-managed"),
        ({"workload_obj": workload(annotations={KUEUE.topology_annotation: ZONE_LABEL,
                                                KUEUE.group_annotation: "train"})},
         "already carry the zone-level request"),
    ],
)  # fmt: skip
def test_refused_before_anything_is_written(changes: dict[str, Any], reason: str) -> None:
    with pytest.raises(PlanRefusedError, match=reason):
        plan(**copy.deepcopy(changes))
