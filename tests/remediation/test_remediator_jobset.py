"""The Remediator on a TrainJob and a JobSet, on the twin over HTTP (official client, real SQLite
store, the agent's own re-diagnosis): each release's path to `resolved` (v2.3: the patch and the
resume in one request; v2.2 and v2.1: patch while suspended, then resume; a JobSet), the MPI
launcher moved alone, another manager's runtime patch kept, the rollback (zonemedic's entry taken
out, the child Jobs that keep the zone key or toleration recreated), and the refusals that write
nothing (a v2.0 Trainer, Kueue)."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from agent.model.job import JobRef
from agent.model.lifecycle import IncidentStatus
from agent.model.workload import JobKind, workload
from agent.remediation import jobset_patch
from agent.remediation.run import Step
from agent.remediation.trainer_release import TRAINJOB_CRD
from agent.remediation.writer import Write, WriteVerb
from agent.store.repository import IncidentStore
from agent.twin.crds import TrainerRelease
from agent.twin.resources import lookup
from tests.remediation.harness import (
    FAST,
    ZONE,
    Lab,
    approved_incident,
    cordon,
    node_zones,
    quick,
    recorded_plan,
    recorded_steps,
    running_lab,
)

TORCH = JobRef(JobKind.TRAINJOB, "ml", "llm-pretrain")
MPI = JobRef(JobKind.TRAINJOB, "ml", "mpi-pretrain")
JOBSET = JobRef(JobKind.JOBSET, "ml", "pytorch-ddp")
SLOW_BIND = replace(FAST, schedule_timeout=timedelta(seconds=1.5))
APPLIED = ["dry_run", "suspending", "suspended", "pods_gone", "patching", "patched", "resumed",
           "bound", "verified"]  # fmt: skip


def served(lab: Lab, ref: JobRef) -> dict[str, Any]:
    kind = workload(ref.kind)
    found: dict[str, Any] = lab.api.json(
        "GET", f"/apis/{kind.api_version}/namespaces/{ref.namespace}/{kind.plural}/{ref.name}")
    return found


def job_zones(lab: Lab, ref: JobRef) -> set[str]:
    """The zones of the job's live pods (finished initializers left out)."""
    label = workload(ref.kind).labels.job_name
    nodes = node_zones(lab)
    found = lab.api.json("GET", f"/api/v1/namespaces/{ref.namespace}/pods",
                         query=[("labelSelector", f"{label}={ref.name}")])["items"]  # fmt: skip
    return {nodes[p["spec"]["nodeName"]] for p in found if p["spec"].get("nodeName")
            and p["status"].get("phase") not in ("Succeeded", "Failed")}  # fmt: skip


def child_jobs(lab: Lab, ref: JobRef) -> dict[str, dict[str, Any]]:
    label = workload(ref.kind).labels.job_name
    items = lab.api.json("GET", f"/apis/batch/v1/namespaces/{ref.namespace}/jobs",
                         query=[("labelSelector", f"{label}={ref.name}")])["items"]  # fmt: skip
    return {j["metadata"]["name"]: j for j in items}


CASES = [
    ("trainjob", TrainerRelease.V2_3, TORCH, 2),  # suspend; patch + resume
    ("trainjob", TrainerRelease.V2_2, TORCH, 3),  # suspend; patch; resume
    ("trainjob", TrainerRelease.V2_1, TORCH, 3),
    ("trainjob-mpi", TrainerRelease.V2_2, MPI, 3),
    ("jobset", TrainerRelease.V2_3, JOBSET, 2),  # suspend; templates + resume
]


@pytest.mark.parametrize(("scenario", "release", "ref", "writes"), CASES,
                         ids=["torch-v2.3", "torch-v2.2", "torch-v2.1", "mpi-v2.2", "jobset"])  # fmt: skip
def test_each_release_suspends_patches_and_resumes_once_to_resolved(
    tmp_path: Path, store: IncidentStore, scenario: str, release: TrainerRelease, ref: JobRef,
    writes: int,
) -> None:  # fmt: skip
    with running_lab(tmp_path, replace(quick(scenario), trainer_release=release)) as lab:
        incident_id = approved_incident(lab, store, ref=ref)
        sent: list[Write] = []
        status = lab.remediator(store, on_write=sent.append).run(incident_id)
        detail = store.get_incident(incident_id)
        assert status is IncidentStatus.RESOLVED, [dict(e.detail) for e in detail.events][-3:]
        steps = recorded_steps(store, incident_id)
        assert steps[-len(APPLIED):] == APPLIED, steps
        assert [(w.verb, w.kind) for w in sent if not w.dry_run] == [(WriteVerb.PATCH, ref.kind.value)] * writes
        plan = recorded_plan(store, incident_id)
        assert job_zones(lab, ref) == {plan.target_zone}
        live = served(lab, ref)
        assert live["spec"].get("suspend") is False
        (target,) = plan.targets
        assert jobset_patch.override_state(target, live).value == "planned"
        if ref.kind is JobKind.TRAINJOB and release is not TrainerRelease.V2_1:
            managers = [e["manager"] for e in live["spec"]["runtimePatches"]]
            assert managers == [jobset_patch.MANAGER]
        if ref == MPI:  # the launcher alone moved, with the GPU toleration
            assert [c.replica for c in target.changes] == ["launcher"]
            assert "tolerations" in target.changes[0].after


@pytest.mark.parametrize(("scenario", "ref"), [("trainjob", TORCH), ("jobset", JOBSET)],
                         ids=["trainjob", "jobset"])  # fmt: skip
def test_a_pod_that_cannot_bind_rolls_back_and_recreates_the_child_jobs_the_merge_keeps(
    tmp_path: Path, store: IncidentStore, scenario: str, ref: JobRef
) -> None:
    with running_lab(tmp_path, scenario) as lab:
        incident_id = approved_incident(lab, store, ref=ref)
        original = copy.deepcopy(served(lab, ref)["spec"])
        before = {name: j["metadata"]["uid"] for name, j in child_jobs(lab, ref).items()}

        def on_step(step: Step) -> None:
            if step is Step.PODS_GONE:  # the new pods find the target zone cordoned
                cordon(lab, recorded_plan(store, incident_id).target_zone)

        status = lab.remediator(store, settings=SLOW_BIND, on_step=on_step).run(incident_id)
        detail = store.get_incident(incident_id)
        assert status is IncidentStatus.ROLLED_BACK, [dict(e.detail) for e in detail.events][-3:]
        reason = str(dict(detail.events[-1].detail)["reason"])
        assert "unschedulable" in reason and "recreated from the restored templates" in reason
        live = served(lab, ref)
        assert live["spec"].get("suspend") is False
        if ref.kind is JobKind.TRAINJOB:
            assert not live["spec"].get("runtimePatches")  # zonemedic's entry out, nothing else
        else:
            assert live["spec"]["replicatedJobs"] == original["replicatedJobs"]
        plan = recorded_plan(store, incident_id)
        changed = {c.replica for c in plan.targets[0].changes}
        after = child_jobs(lab, ref)
        for name, job in after.items():
            rjob = job["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"]
            if rjob in changed:  # recreated from the restored template: no zone key
                assert job["metadata"]["uid"] != before[name]
                assert ZONE not in (job["spec"]["template"]["spec"].get("nodeSelector") or {})
            else:
                assert job["metadata"]["uid"] == before[name]
        steps = recorded_steps(store, incident_id)
        assert steps.count("rollback_started") == 1 and steps.count("rolled_back") == 1


def test_a_trainer_too_old_refuses_the_fix_with_nothing_written(tmp_path: Path, store: IncidentStore) -> None:
    with running_lab(tmp_path, replace(quick("trainjob"), trainer_release=TrainerRelease.V2_1)) as lab:
        incident_id = approved_incident(lab, store, ref=TORCH)
        crds = lookup("customresourcedefinitions")
        crd = copy.deepcopy(lab.cluster.store.get(crds, TRAINJOB_CRD))
        spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        spec["podSpecOverrides"] = spec.pop("podTemplateOverrides")  # as Trainer v2.0 serves it
        lab.cluster.store.update(crds, crd)
        lab.reset_accounting()
        status = lab.remediator(store).run(incident_id)
        detail = store.get_incident(incident_id)
        assert status is IncidentStatus.REFUSED
        assert "Kubeflow Trainer is v2.0" in str(dict(detail.events[-1].detail)["reason"])
        assert lab.writes() == {}
        assert served(lab, TORCH)["spec"].get("suspend") is False


def test_a_kueue_managed_trainjob_is_refused_with_nothing_written(tmp_path: Path, store: IncidentStore) -> None:
    with running_lab(tmp_path, "trainjob") as lab:
        incident_id = approved_incident(lab, store, ref=TORCH)
        rt = lookup("trainjobs")
        obj = lab.cluster.store.get(rt, TORCH.name, namespace="ml")
        obj["metadata"].setdefault("labels", {})["kueue.x-k8s.io/queue-name"] = "team-a"
        lab.cluster.store.update(rt, obj, namespace="ml")
        lab.reset_accounting()
        status = lab.remediator(store).run(incident_id)
        detail = store.get_incident(incident_id)
        assert status is IncidentStatus.REFUSED
        assert "Kueue-managed (queue team-a)" in str(dict(detail.events[-1].detail)["reason"])
        assert lab.writes() == {}


def test_another_managers_runtime_patch_written_while_suspended_is_kept(
    tmp_path: Path, store: IncidentStore
) -> None:
    """Another controller adds its own entry once the TrainJob is suspended (as Kueue does): the
    patch is built from the live list, so the other entry stays, zonemedic's after it."""
    other = {"manager": "example.com/placement",
             "trainingRuntimeSpec": {"template": {"metadata": {"labels": {"team": "research"}}}}}  # fmt: skip
    with running_lab(tmp_path, replace(quick("trainjob"), trainer_release=TrainerRelease.V2_2)) as lab:
        incident_id = approved_incident(lab, store, ref=TORCH)

        def on_step(step: Step) -> None:
            if step is Step.PODS_GONE:
                client.CustomObjectsApi(lab.api.api_client).patch_namespaced_custom_object(
                    "trainer.kubeflow.org", "v1alpha1", "ml", "trainjobs", TORCH.name,
                    {"spec": {"runtimePatches": [other]}})

        status = lab.remediator(store, on_step=on_step).run(incident_id)
        assert status is IncidentStatus.RESOLVED
        entries = served(lab, TORCH)["spec"]["runtimePatches"]
        assert [e["manager"] for e in entries] == ["example.com/placement", jobset_patch.MANAGER]
        assert entries[0]["trainingRuntimeSpec"] == other["trainingRuntimeSpec"]
