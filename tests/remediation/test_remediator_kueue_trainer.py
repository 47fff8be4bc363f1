"""The Kueue fix end to end for the Trainer family, on the twin's Kueue with the real Kubernetes
client as deploy/base's ServiceAccount: a TrainJob (its one PodSet, the `node` replicated job:
rank 0 and the other nodes) and a JobSet of its own, each admitted by Kueue without a topology
request and split across zones, are re-placed through Kueue -- the Workload deactivated, the
zone-level request written (the TrainJob: zonemedic's own runtimePatches entry beside Kueue's;
the JobSet: its replicated job's pod template), the suspended child Jobs keeping Kueue's old
marks renewed, the Workload deleted so Kueue rebuilds and admits it in one zone -- and resolved;
zonemedic never writes the job's `suspend` nor a nodeSelector. A rollback takes out exactly
what it added."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.model.cluster import ZONE_LABEL
from agent.model.job import JobRef
from agent.model.lifecycle import IncidentStatus
from agent.model.workload import KUEUE, KUEUE_WORKLOAD, TRAINJOB_PATCH_MANAGER, JobKind
from agent.remediation.run import Step
from agent.settings import RemediationSettings
from agent.store.repository import IncidentStore
from agent.twin.faults import AuditEntry
from tests.remediation.harness import Lab, approved_incident, recorded_plan, running_lab

TRAINJOB = JobRef(JobKind.TRAINJOB, "ml", "llm-pretrain")
JOBSET = JobRef(JobKind.JOBSET, "ml", "pytorch-ddp")
TRAINJOB_PATH = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ml/trainjobs/llm-pretrain"
JOBSET_PATH = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ml/jobsets/pytorch-ddp"
KUEUE_ENTRY = "kueue.x-k8s.io/manager"
MPI = JobRef(JobKind.TRAINJOB, "ml", "mpi-pretrain")
CASES = [("kueue-trainjob", TRAINJOB, "trainjobs"), ("kueue-jobset", JOBSET, "jobsets")]


def ours(trainjob: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in trainjob["spec"].get("runtimePatches") or []
            if p["manager"] == TRAINJOB_PATCH_MANAGER]  # fmt: skip


def template_annotations(lab: Any, ref: JobRef) -> dict[str, str]:
    js = lab.api.json("GET", JOBSET_PATH if ref.kind is JobKind.JOBSET
                      else "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ml/jobsets/llm-pretrain")  # fmt: skip
    rjob = js["spec"]["replicatedJobs"][0]
    return dict((rjob["template"]["spec"]["template"].get("metadata") or {}).get("annotations") or {})


@pytest.mark.parametrize(("scenario", "ref", "plural"), CASES)
def test_a_split_kueue_trainjob_or_jobset_is_re_placed_through_kueue(
    tmp_path: Path, store: IncidentStore, live_pod_zones: Callable[[Lab], dict[str, int]],
    agent_writes: Callable[[Lab, tuple[str, ...]], list[AuditEntry]], scenario: str, ref: JobRef,
    plural: str,
) -> None:  # fmt: skip
    with running_lab(tmp_path, scenario, rbac=True) as lab:
        steps: list[Step] = []
        incident_id = approved_incident(lab, store, ref=ref)
        status = lab.remediator(store, on_step=steps.append).run(incident_id)
        detail = store.get_incident(incident_id)
        assert status is IncidentStatus.RESOLVED, [(a.payload.get("step"), a.message)
                                                   for a in detail.actions]
        assert [s for s in steps if s in (Step.DEACTIVATED, Step.PODS_GONE, Step.ANNOTATED,
                                          Step.RENEWED, Step.RESUMED, Step.ADMITTED,
                                          Step.BOUND)] == [
            Step.DEACTIVATED, Step.PODS_GONE, Step.ANNOTATED, Step.RENEWED, Step.RESUMED,
            Step.ADMITTED, Step.BOUND]  # fmt: skip
        assert live_pod_zones(lab) == {"us-east-1a": 4}
        assert template_annotations(lab, ref)[KUEUE.topology_annotation] == ZONE_LABEL
        job = lab.api.json("GET", TRAINJOB_PATH if ref.kind is JobKind.TRAINJOB else JOBSET_PATH)
        assert job["spec"]["suspend"] is False  # Kueue resumed it
        if ref.kind is JobKind.TRAINJOB:
            (entry,) = ours(job)
            (rjob,) = entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
            assert rjob == {"name": "node", "template": {"spec": {"template": {"metadata": {
                "annotations": {KUEUE.topology_annotation: ZONE_LABEL}}}}}}  # fmt: skip
            assert [p["manager"] for p in job["spec"]["runtimePatches"]] == [
                KUEUE_ENTRY, TRAINJOB_PATCH_MANAGER]  # Kueue's own entry left where it was
        written = agent_writes(lab, ("patch", "delete", "update", "create"))
        # the Workload, the job's templates and the renewed child Jobs only: never the job's
        # suspend (a patch of the job carries none: checked by the twin's accounting of what
        # it wrote), never a nodeSelector (no template holds one)
        assert {(e.verb, e.resource) for e in written} == {
            ("patch", KUEUE_WORKLOAD.plural), ("patch", plural), ("delete", KUEUE_WORKLOAD.plural),
            ("delete", "jobs")}  # fmt: skip
        assert all(e.allowed for e in written)
        plan = recorded_plan(store, incident_id)
        assert "suspend" not in str(plan.targets[1].override)
        assert all(set(c.after) == {"annotations"} for t in plan.targets for c in t.changes)
        assert KUEUE.topology_annotation in plan.diff


def test_an_mpi_trainjobs_launcher_and_nodes_are_grouped_into_one_zone_through_kueue(
    tmp_path: Path, store: IncidentStore, live_pod_zones: Callable[[Lab], dict[str, int]],
) -> None:
    """Two PodSets (the single-pod launcher and the nodes): zonemedic's entry gives both the zone
    and one podset-group-name, and Kueue places the pair in one zone."""
    with running_lab(tmp_path, "kueue-trainjob-mpi", rbac=True) as lab:
        incident_id = approved_incident(lab, store, ref=MPI)
        status = lab.remediator(store).run(incident_id)
        detail = store.get_incident(incident_id)
        assert status is IncidentStatus.RESOLVED, [(a.payload.get("step"), a.message)
                                                   for a in detail.actions]
        assert live_pod_zones(lab) == {"us-east-1a": 5}
        job = lab.api.json("GET", "/apis/trainer.kubeflow.org/v1alpha1/namespaces/ml/trainjobs/"
                                  "mpi-pretrain")  # fmt: skip
        (entry,) = ours(job)
        rjobs = entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
        assert {r["name"]: r["template"]["spec"]["template"]["metadata"]["annotations"]
                for r in rjobs} == {
            name: {KUEUE.topology_annotation: ZONE_LABEL, KUEUE.group_annotation: "mpi-pretrain"}
            for name in ("node", "launcher")}  # fmt: skip


@pytest.mark.parametrize(("scenario", "ref", "plural"), CASES)
def test_kueue_not_admitting_a_trainjob_or_jobset_in_time_rolls_back_exactly(
    tmp_path: Path, store: IncidentStore, no_gpu_quota: Callable[[Lab], None],
    admission_given_up: RemediationSettings, workloads: Callable[[Lab], list[dict[str, Any]]],
    scenario: str, ref: JobRef, plural: str,
) -> None:  # fmt: skip
    """The ClusterQueue loses its GPU quota once the job is annotated: Kueue cannot admit it, the
    run rolls back -- the TrainJob's entry of zonemedic's removed (Kueue's kept), the JobSet's
    annotation removed -- and the rebuilt Workload is active again."""
    del plural
    with running_lab(tmp_path, scenario, rbac=True) as lab:

        def squeeze(step: Step) -> None:
            if step is Step.RENEWED:
                no_gpu_quota(lab)

        incident_id = approved_incident(lab, store, ref=ref)
        status = lab.remediator(store, settings=admission_given_up, on_step=squeeze).run(incident_id)
        detail = store.get_incident(incident_id)
        assert status is IncidentStatus.ROLLED_BACK, [(a.payload.get("step"), a.message)
                                                      for a in detail.actions]
        assert "Kueue did not admit the job" in str(detail.events[-1].detail)
        job = lab.api.json("GET", TRAINJOB_PATH if ref.kind is JobKind.TRAINJOB else JOBSET_PATH)
        if ref.kind is JobKind.TRAINJOB:
            assert ours(job) == []
            assert [p["manager"] for p in job["spec"]["runtimePatches"]] == [KUEUE_ENTRY]
        assert KUEUE.topology_annotation not in template_annotations(lab, ref)
        assert [w["spec"].get("active", True) for w in workloads(lab)] == [True]
