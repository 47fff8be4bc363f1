"""The TrainJob and JobSet planner on the objects the twin serves, read with the real client.

Each case starts the twin on a packaged scenario (a Trainer release the scenario or the test sets),
waits until the job's gang is bound, reads the live objects as the run reads them
(`ClusterReader.live_objects`, the TrainJob CRD included) and plans a finding stated as data (the
split and its target zone). What the plan writes is checked where it goes: zonemedic's own
`runtimePatches` entry (v2.2+, patch and resume in one request on v2.3 only), its
`podTemplateOverrides` entries (v2.1), the JobSet's templates; and every refusal: a Trainer too
old (a v2.0-shaped CRD served), a Kueue-managed TrainJob or JobSet, a JobSet a TrainJob owns.
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agent.model.finding import Finding
from agent.model.job import JobRef
from agent.model.verdict import Verdict
from agent.model.workload import JobKind
from agent.remediation import jobset_patch
from agent.remediation.observe import ClusterReader
from agent.remediation.plan import LiveObjects, Plan, Refusal, TargetAction
from agent.remediation.planner import plan_remediation
from agent.remediation.preview_action import describe
from agent.remediation.trainer_release import TRAINJOB_CRD
from agent.twin.crds import TrainerRelease
from agent.twin.resources import lookup
from agent.twin.scenario import Scenario
from tests.remediation.harness import ZONE, Lab, quick, running_lab

TORCH = JobRef(JobKind.TRAINJOB, "ml", "llm-pretrain")
MPI = JobRef(JobKind.TRAINJOB, "ml", "mpi-pretrain")
JOBSET = JobRef(JobKind.JOBSET, "ml", "pytorch-ddp")
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}


def at_release(name: str, release: TrainerRelease) -> Scenario:
    return replace(quick(name), trainer_release=release)


def bound_zones(lab: Lab, ref: JobRef, pods: int) -> Counter[str]:
    """Zone -> pods of the job once `pods` live pods of it are bound (else empty)."""
    reader = ClusterReader(lab.api)
    zone_of = {n["metadata"]["name"]: n["metadata"]["labels"].get(ZONE) for n in reader.nodes()}
    live = [p for p in reader.kubeflow_pods(ref) if p["status"].get("phase") not in ("Succeeded", "Failed")
            and not p["metadata"].get("deletionTimestamp")]  # fmt: skip
    if len(live) != pods or not all(p["spec"].get("nodeName") for p in live):
        return Counter()
    return Counter(str(zone_of[p["spec"]["nodeName"]]) for p in live)


def live_of(lab: Lab, ref: JobRef, *, pods: int, zone: str) -> tuple[Finding, LiveObjects]:
    assert lab.cluster.wait_until(lambda: len(bound_zones(lab, ref, pods)) > 1, timeout=60)
    zones = bound_zones(lab, ref, pods)
    reader = ClusterReader(lab.api)
    live = reader.live_objects(ref, target_zone=zone, job=reader.job(ref))
    finding = Finding(ref, Verdict.ZONE_SPLIT_DEGRADED, dict(zones), None, remediable=True,
                      target_zone=zone)  # fmt: skip
    return finding, live


def planned(lab: Lab, ref: JobRef, *, pods: int, zone: str = "us-east-1a") -> Plan:
    result = plan_remediation(*live_of(lab, ref, pods=pods, zone=zone))
    assert isinstance(result, Plan), result
    return result


def refused(lab: Lab, ref: JobRef, *, pods: int, zone: str = "us-east-1a") -> str:
    result = plan_remediation(*live_of(lab, ref, pods=pods, zone=zone))
    assert isinstance(result, Refusal), result
    return result.reason


# ------------------------------------------------------------------------------------------------
# plans


@pytest.mark.parametrize(("release", "together"), [(TrainerRelease.V2_3, True), (TrainerRelease.V2_2, False)])
def test_a_torch_trainjob_gets_its_own_runtime_patch_entry_pinning_the_nodes(
    tmp_path: Path, release: TrainerRelease, together: bool
) -> None:
    with running_lab(tmp_path, at_release("trainjob", release)) as lab:
        plan = planned(lab, TORCH, pods=4)
    (target,) = plan.targets
    assert target.action is TargetAction.SUSPEND_PATCH_RESUME and target.kind == "TrainJob"
    assert [c.replica for c in target.changes] == ["node"]  # the initializer is left alone
    assert target.override is not None
    assert target.override["field"] == "runtimePatches" and target.override["manager"] == jobset_patch.MANAGER
    assert target.override["resume_with_patch"] is together
    (entry,) = target.override["entries"]
    (rjob,) = entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert rjob == {"name": "node", "template": {"spec": {"template": {"spec": {
        "nodeSelector": {ZONE: "us-east-1a"}}}}}}  # the runtime's toleration is enough there
    assert plan.gang == 4 and "runtimePatches entry (manager zonemedic.io/remediation)" in plan.diff
    assert "affinity" not in plan.diff  # the JobSet refuses an affinity change
    said = describe(plan)  # the preview, and the Slack post's fix
    assert said.startswith("co-locate the job in zone us-east-1a: suspend TrainJob ml/llm-pretrain, "
                           "wait for its pods to go, set the zone nodeSelector on its own "
                           "runtimePatches entry (manager zonemedic.io/remediation) (node), then "
                           "resume it")  # fmt: skip
    assert ("in the same request" in said) is together


def test_an_mpi_trainjob_moves_its_cpu_only_launcher_alone_with_the_gpu_toleration(tmp_path: Path) -> None:
    with running_lab(tmp_path, "trainjob-mpi") as lab:  # Trainer v2.2
        plan = planned(lab, MPI, pods=5)
    (target,) = plan.targets
    assert [c.replica for c in target.changes] == ["launcher"]  # the nodes can only be in us-east-1a
    (change,) = target.changes
    assert change.after == {"nodeSelector": "us-east-1a", "tolerations": [GPU_TOLERATION]}
    assert target.override is not None and target.override["resume_with_patch"] is False
    assert plan.gang == 5
    assert ("set the zone nodeSelector and tolerations for the zone's node taints on its own "
            "runtimePatches entry (manager zonemedic.io/remediation) (launcher)") in describe(plan)


def test_a_v21_trainjob_gets_its_own_pod_template_overrides(tmp_path: Path) -> None:
    with running_lab(tmp_path, at_release("trainjob", TrainerRelease.V2_1)) as lab:
        plan = planned(lab, TORCH, pods=4)
    (target,) = plan.targets
    assert target.override is not None and target.override["field"] == "podTemplateOverrides"
    assert target.override["entries"] == [{"targetJobs": [{"name": "node"}],
                                           "spec": {"nodeSelector": {ZONE: "us-east-1a"}}}]  # fmt: skip
    assert target.override["resume_with_patch"] is False


def test_a_jobset_gets_its_pod_templates_patched_with_the_resume(tmp_path: Path) -> None:
    with running_lab(tmp_path, "jobset") as lab:
        plan = planned(lab, JOBSET, pods=4)
    (target,) = plan.targets
    assert target.kind == "JobSet" and target.override is not None
    assert target.override["field"] == "replicatedJobs" and target.override["resume_with_patch"] is True
    assert [c.replica for c in target.changes] == ["workers"]
    assert "on its replicated jobs' pod templates (workers), then resume it in the same request" in describe(plan)


# ------------------------------------------------------------------------------------------------
# refusals


def test_a_trainer_too_old_is_refused_with_the_releases_that_work(tmp_path: Path) -> None:
    with running_lab(tmp_path, at_release("trainjob", TrainerRelease.V2_1)) as lab:
        crds = lookup("customresourcedefinitions")
        crd = copy.deepcopy(lab.cluster.store.get(crds, TRAINJOB_CRD))
        spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        spec["podSpecOverrides"] = spec.pop("podTemplateOverrides")  # as Trainer v2.0 serves it
        lab.cluster.store.update(crds, crd)
        reason = refused(lab, TORCH, pods=4)
    assert "v2.0" in reason and "v2.1+ (podTemplateOverrides)" in reason


def _label_queue(lab: Lab, ref: JobRef, plural: str) -> None:
    rt = lookup(plural)
    obj = lab.cluster.store.get(rt, ref.name, namespace=ref.namespace)
    obj["metadata"].setdefault("labels", {})["kueue.x-k8s.io/queue-name"] = "team-a"
    lab.cluster.store.update(rt, obj, namespace=ref.namespace)


@pytest.mark.parametrize(("scenario", "ref", "plural", "pods"),
                         [("trainjob", TORCH, "trainjobs", 4), ("jobset", JOBSET, "jobsets", 4)],
                         ids=["trainjob", "jobset"])  # fmt: skip
def test_a_kueue_managed_job_is_refused(tmp_path: Path, scenario: str, ref: JobRef, plural: str,
                                        pods: int) -> None:  # fmt: skip
    with running_lab(tmp_path, scenario) as lab:
        assert lab.cluster.wait_until(lambda: bound_zones(lab, ref, pods), timeout=60)
        _label_queue(lab, ref, plural)
        reason = refused(lab, ref, pods=pods)
    assert reason.startswith("Kueue-managed (queue team-a)") and "podset-required-topology" in reason


def test_a_jobset_a_trainjob_owns_is_refused_naming_the_trainjob(tmp_path: Path) -> None:
    with running_lab(tmp_path, "trainjob") as lab:
        reason = refused(lab, JobRef(JobKind.JOBSET, "ml", "llm-pretrain"), pods=4)
    assert reason == ("the JobSet is owned by TrainJob ml/llm-pretrain, whose controller rewrites "
                      "its templates: fix the TrainJob")  # fmt: skip


def test_every_replicated_job_already_pinned_is_refused(tmp_path: Path) -> None:
    with running_lab(tmp_path, "jobset") as lab:
        finding, live = live_of(lab, JOBSET, pods=4, zone="us-east-1a")
        assert live.job is not None
        job: dict[str, Any] = copy.deepcopy(dict(live.job))
        pod = job["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        pod["nodeSelector"] = {ZONE: "us-east-1a"}
        result = plan_remediation(finding, replace(live, job=job))
    assert isinstance(result, Refusal) and "already pins zone us-east-1a" in result.reason


def test_the_zone_mirroring_label_a_template_carries_goes_into_the_runtime_patch(tmp_path: Path) -> None:
    with running_lab(tmp_path, "trainjob-mpi") as lab:
        finding, live = live_of(lab, MPI, pods=5, zone="us-east-1a")
    assert live.materialised is not None
    jobset: dict[str, Any] = copy.deepcopy(dict(live.materialised))
    launcher = next(r for r in jobset["spec"]["replicatedJobs"] if r["name"] == "launcher")
    launcher["template"]["spec"]["template"].setdefault("metadata", {})["labels"] = {
        "netpol.example.com/zone": "us-east-1b"}  # the template mirrors the zone it was placed in
    result = plan_remediation(finding, replace(live, materialised=jobset),
                              mirror_keys=("netpol.example.com/zone",))  # fmt: skip
    assert isinstance(result, Plan), result
    (target,) = result.targets
    assert target.override is not None
    (entry,) = target.override["entries"]
    (rjob,) = entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod = rjob["template"]["spec"]["template"]
    assert pod["metadata"] == {"labels": {"netpol.example.com/zone": "us-east-1a"}}
    assert pod["spec"]["nodeSelector"] == {ZONE: "us-east-1a"}
