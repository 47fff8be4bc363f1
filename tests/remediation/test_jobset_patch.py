"""The patches of a TrainJob's and a JobSet's remediation, built from a target and a live object:
another manager's runtime patch kept as it is, zonemedic's entries in and out, states read back,
and which child Jobs keep what the JobSet's resume merge cannot take back."""

from __future__ import annotations

from typing import Any

import pytest

from agent.remediation import jobset_patch
from agent.remediation.plan import Target, TargetAction
from agent.remediation.template import TemplateChange, TemplateState

ZONE = "topology.kubernetes.io/zone"
GPU = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
CHANGE = TemplateChange(replica="launcher", path=(), before={"nodeSelector": None, "tolerations": None},
                        after={"nodeSelector": "zone-a", "tolerations": [GPU]},
                        absent=("nodeSelector", "affinity", "podAffinity"))  # fmt: skip
KUEUE_ENTRY = {"manager": "kueue.x-k8s.io/manager", "time": "2026-01-01T00:00:00Z",
               "trainingRuntimeSpec": {"template": {"metadata": {"labels": {"a": "b"}}}}}  # fmt: skip


def target(field: str, entries: list[dict[str, Any]]) -> Target:
    return Target(action=TargetAction.SUSPEND_PATCH_RESUME, api_version="trainer.kubeflow.org/v1alpha1",
                  kind="TrainJob", plural="trainjobs", namespace="ml", name="j", uid="u",
                  resource_version="1", changes=(CHANGE,),
                  override={"field": field, "entries": entries})  # fmt: skip


OURS = jobset_patch.runtime_patch_entry([CHANGE])
RUNTIME = target("runtimePatches", [OURS])
OVERRIDES = target("podTemplateOverrides", jobset_patch.pod_template_overrides([CHANGE]))


def jobset(pod_spec: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": {"containers": []}}}}},
        {"name": "launcher", "template": {"spec": {"template": {"spec": pod_spec}}}},
    ]}}  # fmt: skip


JOBSET = Target(action=TargetAction.SUSPEND_PATCH_RESUME, api_version="jobset.x-k8s.io/v1alpha2",
                kind="JobSet", plural="jobsets", namespace="ml", name="j", uid="u",
                resource_version="1", changes=(CHANGE,), override={"field": "replicatedJobs"})  # fmt: skip


def test_the_runtime_patch_entry_carries_the_change_under_its_replicated_job() -> None:
    assert OURS == {"manager": "zonemedic.io/remediation", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "launcher", "template": {"spec": {"template": {"spec": {
            "nodeSelector": {ZONE: "zone-a"}, "tolerations": [GPU]}}}}}]}}}}  # fmt: skip


@pytest.mark.parametrize(("live", "suspend", "expected"), [
    ({"spec": {}}, False, {"spec": {"runtimePatches": [OURS], "suspend": False}}),
    ({"spec": {"runtimePatches": [KUEUE_ENTRY]}}, True,
     {"spec": {"runtimePatches": [KUEUE_ENTRY, OURS], "suspend": True}}),
    ({"spec": {"runtimePatches": [{**OURS, "time": "x"}, KUEUE_ENTRY]}}, None,
     {"spec": {"runtimePatches": [KUEUE_ENTRY, OURS]}}),
], ids=["alone", "after-kueue", "ours-replaced"])  # fmt: skip
def test_the_forward_patch_keeps_the_other_managers_entries(
    live: dict[str, Any], suspend: bool | None, expected: dict[str, Any]
) -> None:
    assert jobset_patch.forward_patch(RUNTIME, live, suspend=suspend) == expected


@pytest.mark.parametrize(("live", "state"), [
    ({"spec": {}}, TemplateState.ORIGINAL),
    ({"spec": {"runtimePatches": [KUEUE_ENTRY]}}, TemplateState.ORIGINAL),
    ({"spec": {"runtimePatches": [KUEUE_ENTRY, {**OURS, "time": "2026-12-03T00:00:00Z"}]}}, TemplateState.PLANNED),
    ({"spec": {"runtimePatches": [{"manager": "zonemedic.io/remediation"}]}}, TemplateState.OTHER),
], ids=["none", "kueue-only", "ours-with-time", "ours-changed"])  # fmt: skip
def test_the_runtime_patch_state(live: dict[str, Any], state: TemplateState) -> None:
    assert jobset_patch.override_state(RUNTIME, live) is state


def test_the_restore_takes_out_zonemedics_entry_alone() -> None:
    live = {"spec": {"runtimePatches": [KUEUE_ENTRY, {**OURS, "time": "x"}]}}
    assert jobset_patch.restore_patch(RUNTIME, live, suspend=True) == {
        "spec": {"runtimePatches": [KUEUE_ENTRY], "suspend": True}}


def test_pod_template_overrides_are_added_once_and_removed_exactly() -> None:
    theirs = {"targetJobs": [{"name": "node"}], "spec": {"nodeSelector": {"disk": "ssd"}}}
    live = {"spec": {"podTemplateOverrides": [theirs]}}
    forward = jobset_patch.forward_patch(OVERRIDES, live, suspend=True)
    ours = jobset_patch.pod_template_overrides([CHANGE])
    assert forward == {"spec": {"podTemplateOverrides": [theirs, *ours], "suspend": True}}
    after = {"spec": {"podTemplateOverrides": forward["spec"]["podTemplateOverrides"]}}
    assert jobset_patch.forward_patch(OVERRIDES, after, suspend=None)["spec"]["podTemplateOverrides"] == [theirs, *ours]
    assert jobset_patch.override_state(OVERRIDES, after) is TemplateState.PLANNED
    assert jobset_patch.restore_patch(OVERRIDES, after, suspend=None) == {"spec": {"podTemplateOverrides": [theirs]}}
    assert jobset_patch.override_state(OVERRIDES, live) is TemplateState.ORIGINAL


def test_a_jobset_template_is_patched_and_restored_in_its_replicated_job() -> None:
    live = jobset({"containers": [{"name": "m"}]})
    forward = jobset_patch.forward_patch(JOBSET, live, suspend=False)
    rjobs = forward["spec"]["replicatedJobs"]
    assert rjobs[0] == live["spec"]["replicatedJobs"][0]  # untouched
    assert rjobs[1]["template"]["spec"]["template"]["spec"] == {
        "containers": [{"name": "m"}], "nodeSelector": {ZONE: "zone-a"}, "tolerations": [GPU]}
    assert forward["spec"]["suspend"] is False
    patched = {"spec": {"replicatedJobs": rjobs}}
    assert jobset_patch.templates_state(JOBSET, patched) is TemplateState.PLANNED
    restored = {"spec": jobset_patch.restore_patch(JOBSET, patched, suspend=True)["spec"]}
    assert restored["spec"]["replicatedJobs"] == live["spec"]["replicatedJobs"]
    assert jobset_patch.templates_state(JOBSET, restored) is TemplateState.ORIGINAL


def child(name: str, rjob: str, pod_spec: dict[str, Any], *, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"jobset.sigs.k8s.io/replicatedjob-name": rjob}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-03T00:00:00Z"
    return {"metadata": meta, "spec": {"template": {"spec": pod_spec}}}


@pytest.mark.parametrize(("job", "stale"), [
    (child("j-launcher-0", "launcher", {"nodeSelector": {ZONE: "zone-a"}}), True),
    (child("j-launcher-0", "launcher", {"tolerations": [GPU]}), True),
    (child("j-launcher-0", "launcher", {}), False),
    (child("j-launcher-0", "launcher", {"nodeSelector": {ZONE: "zone-b"}}), False),
    (child("j-node-0", "node", {"nodeSelector": {ZONE: "zone-a"}}), False),  # not a changed job
    (child("j-launcher-0", "launcher", {"tolerations": [GPU]}, deleting=True), False),
], ids=["zone-key-kept", "toleration-kept", "clean", "other-zone", "unchanged-rjob", "being-deleted"])  # fmt: skip
def test_which_child_jobs_keep_what_the_resume_merge_cannot_take_back(job: dict[str, Any], stale: bool) -> None:
    assert bool(jobset_patch.stale_children(JOBSET, [job])) is stale


def test_a_zone_the_original_had_is_restored_by_the_merge() -> None:
    change = TemplateChange(replica="launcher", path=(), before={"nodeSelector": "zone-b"},
                            after={"nodeSelector": "zone-a"})  # fmt: skip
    assert not jobset_patch.stale(change, {"spec": {"nodeSelector": {ZONE: "zone-a"}}})
