"""Crash safety of the Kueue rollback, in process (the crash walk, `tests.remediation.crashes`):
for each Kueue kind (a PyTorchJob, a JobSet of its own, a TrainJob), the ClusterQueue loses its
GPU quota once the job is annotated, Kueue cannot admit it and the run rolls back through Kueue;
every point of that rollback -- each rollback step recorded, each write the server answered
before its step is recorded (the current Workload deactivated, the job's own annotations
restored, the child Job keeping the plan's marks renewed, the Workload deleted so Kueue rebuilds
it) -- killed once (or the database refusing records from there on), then resumed by a fresh
Remediator, point after point. The rollback ends: the job holds its own annotations again,
Kueue's rebuilt Workload is the only one and active, each rollback write was sent once, each
rollback step recorded once, and the incident is closed `rolled_back`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agent.model.job import JobRef
from agent.model.lifecycle import IncidentStatus
from agent.model.workload import KUEUE, KUEUE_WORKLOAD, TRAINJOB_PATCH_MANAGER, JobKind
from agent.remediation.run import Step
from agent.remediation.writer import WriteVerb
from agent.store.repository import IncidentStore
from agent.twin.patch import PatchType
from agent.twin.resources import lookup
from tests.remediation.crashes import Death, SqliteLock, Walk
from tests.remediation.harness import (
    FAST,
    OUTAGE_BUDGET,
    PATIENT,
    Lab,
    approved_incident,
    new_store,
    recorded_steps,
    running_lab,
)

# the forward path must not time out into a rollback before the squeeze on a loaded machine; the
# admission Kueue cannot give once squeezed is given up on quickly
GIVING_UP = replace(PATIENT, schedule_timeout=timedelta(seconds=1.5))
WORKLOAD = KUEUE_WORKLOAD.kind.value
KUEUE_ENTRY = "kueue.x-k8s.io/manager"
# scenario, job, the step after which the quota goes, the child Job renewed (forward and back)
KINDS = [
    ("kueue", JobRef(JobKind.PYTORCH, "ml", "llm-finetune"), Step.ANNOTATED, None),
    ("kueue-jobset", JobRef(JobKind.JOBSET, "ml", "pytorch-ddp"), Step.RENEWED, "pytorch-ddp-workers-0"),
    ("kueue-trainjob", JobRef(JobKind.TRAINJOB, "ml", "llm-pretrain"), Step.RENEWED, "llm-pretrain-node-0"),
]
ROLLBACK_STEPS = ["rollback_deactivated", "rollback_pods_gone", "rollback_restored", "rollback_requeued"]


HOLD = "test.zonemedic.io/hold"


def hold_a_pod(lab: Lab) -> str:
    """One of the job's pods given a finalizer nobody removes (until `release`): once deleted it
    stays Terminating. Returns its name."""
    name = str(lab.api.json("GET", "/api/v1/namespaces/ml/pods")["items"][0]["metadata"]["name"])
    lab.cluster.store.patch(lookup("pods"), name, {"metadata": {"finalizers": [HOLD]}},
                            namespace="ml", patch_type=PatchType.MERGE)  # fmt: skip
    return name


def release(lab: Lab, name: str) -> None:
    lab.cluster.store.patch(lookup("pods"), name, {"metadata": {"finalizers": None}},
                            namespace="ml", patch_type=PatchType.MERGE)  # fmt: skip


def rollback_walk(make: Callable[[Any, Any], Any], store: IncidentStore, incident_id: int,
                  death: Death, tmp_path: Path) -> Walk:  # fmt: skip
    """The crash walk over the rollback's points only (with the store away: its writes only)."""

    def rolling_back(where: str) -> bool:
        if death is Death.STORE_AWAY and where.startswith("step "):
            return False
        return Step.ROLLBACK_STARTED.value in recorded_steps(store, incident_id)

    return Walk(make, store, incident_id, death, only=rolling_back,
                outage=SqliteLock(str(tmp_path / "incidents.db")))  # fmt: skip


def own_annotations(lab: Lab, ref: JobRef) -> list[dict[str, str]]:
    """The annotations of the pod templates Kueue reads the job's PodSets from."""
    if ref.kind is JobKind.PYTORCH:
        job = lab.api.json("GET", f"/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/{ref.name}")
        return [dict(s["template"]["metadata"].get("annotations") or {})
                for s in job["spec"]["pytorchReplicaSpecs"].values()]  # fmt: skip
    jobset = lab.api.json("GET", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/ml/jobsets/{ref.name}")
    return [dict((r["template"]["spec"]["template"].get("metadata") or {}).get("annotations") or {})
            for r in jobset["spec"]["replicatedJobs"]]  # fmt: skip


@pytest.mark.parametrize("death", [Death.KILL, Death.STORE_AWAY])
@pytest.mark.parametrize(("scenario", "ref", "after", "child"), KINDS, ids=["pytorchjob", "jobset", "trainjob"])
def test_every_point_of_a_kueue_rollback_stopped_then_resumed_restores_the_job_once(
    tmp_path: Path, template: Path, no_gpu_quota: Callable[[Lab], None],
    workloads: Callable[[Lab], list[dict[str, Any]]], death: Death, scenario: str, ref: JobRef,
    after: Step, child: str | None,
) -> None:  # fmt: skip
    store, _ = new_store(template, tmp_path, **OUTAGE_BUDGET)
    try:
        with running_lab(tmp_path, scenario) as lab:
            incident_id = approved_incident(lab, store, ref=ref)
            squeezed: list[bool] = []

            def make(walk_step: Any, walk_write: Any) -> Any:
                def both(step: Step) -> None:
                    if step is after and not squeezed:
                        no_gpu_quota(lab)
                        squeezed.append(True)
                    walk_step(step)

                return lab.remediator(store, settings=GIVING_UP, on_step=both, on_write=walk_write)

            walk = rollback_walk(make, store, incident_id, death, tmp_path)
            assert walk.run() is IncidentStatus.ROLLED_BACK, walk.outcomes
            detail = store.get_incident(incident_id)
            assert "Kueue did not admit the job" in str(detail.events[-1].detail)
            kind = ref.kind.value
            expected = [f"patch {WORKLOAD}", f"patch {kind} {ref.name} #2", f"delete {WORKLOAD}"]
            expected += [f"delete Job {child} #2"] if child else []
            if death is Death.KILL:
                expected += ["step rollback_started", "step restoring patch", "step rollback_deactivated",
                             "step rollback_pods_gone", f"step restoring patch {ref.name}",
                             "step rollback_restored", "step restoring delete", "step rollback_requeued",
                             "step rolled_back"]  # fmt: skip
                if child:
                    expected += [f"step restoring delete {child}", "step rollback_renewed"]
            for where in expected:
                assert any(s.startswith(where) for s in walk.stops), (where, walk.stops)
            writes = [(w.verb, w.kind) for w in walk.writes]
            # forward once and rollback once, however many times the rollback was stopped
            assert writes.count((WriteVerb.PATCH, WORKLOAD)) == 2  # deactivated, then the rebuilt one
            assert writes.count((WriteVerb.DELETE, WORKLOAD)) == 2  # requeued, then rebuilt as before
            assert writes.count((WriteVerb.PATCH, kind)) == 2  # annotated, restored
            assert writes.count((WriteVerb.DELETE, "Job")) == (2 if child else 0)  # renewed, back
            for annotations in own_annotations(lab, ref):
                assert KUEUE.topology_annotation not in annotations
                assert KUEUE.group_annotation not in annotations
            if ref.kind is JobKind.TRAINJOB:
                job = lab.api.json("GET", f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/ml/trainjobs/{ref.name}")
                assert [p["manager"] for p in job["spec"]["runtimePatches"]] == [KUEUE_ENTRY]
                assert TRAINJOB_PATCH_MANAGER not in str(job["spec"]["runtimePatches"])
            assert [w["spec"].get("active", True) for w in workloads(lab)] == [True]  # rebuilt, active
            steps = recorded_steps(store, incident_id)
            assert steps.count("rollback_started") == 1 and steps.count("rolled_back") == 1
            for step in ROLLBACK_STEPS + (["rollback_renewed"] if child else []):
                assert steps.count(step) == 1, (step, steps)
            assert store.get_incident(incident_id).incident.status is IncidentStatus.ROLLED_BACK
    finally:
        store.close()


@pytest.mark.parametrize("death", [Death.KILL, Death.STORE_AWAY])
def test_every_point_of_undoing_a_deactivation_only_stopped_then_resumed_reactivates_it_once(
    tmp_path: Path, template: Path, workloads: Callable[[Lab], list[dict[str, Any]]], death: Death
) -> None:
    """One of the job's pods held Terminating (a finalizer of someone else's): it is still there
    `suspend_timeout` after the Workload's deactivation, the run rolls back before any
    annotation; undoing it is one write (the planned Workload reactivated), stopped at and
    resumed from like any other."""
    ref = JobRef(JobKind.PYTORCH, "ml", "llm-finetune")
    store, _ = new_store(template, tmp_path, **OUTAGE_BUDGET)
    try:
        with running_lab(tmp_path, "kueue") as lab:
            incident_id = approved_incident(lab, store, ref=ref)
            (planned,) = workloads(lab)
            held = hold_a_pod(lab)
            hasty = replace(FAST, suspend_timeout=timedelta(seconds=1.5))

            def make(walk_step: Any, walk_write: Any) -> Any:
                return lab.remediator(store, settings=hasty, on_step=walk_step, on_write=walk_write)

            walk = rollback_walk(make, store, incident_id, death, tmp_path)
            assert walk.run() is IncidentStatus.ROLLED_BACK, walk.outcomes
            assert "still present" in str(store.get_incident(incident_id).events[-1].detail)
            release(lab, held)
            expected = [f"patch {WORKLOAD} {planned['metadata']['name']} #2"]
            if death is Death.KILL:
                expected += ["step rollback_started", "step restoring patch", "step rollback_reactivated",
                             "step rolled_back"]  # fmt: skip
            for where in expected:
                assert any(s.startswith(where) for s in walk.stops), (where, walk.stops)
            # deactivated, reactivated: nothing else written, whatever the stops
            assert [(w.verb, w.kind) for w in walk.writes] == [(WriteVerb.PATCH, WORKLOAD)] * 2
            (now,) = workloads(lab)
            assert now["metadata"]["uid"] == planned["metadata"]["uid"]  # the same one, active
            assert now["spec"].get("active", True) is True
            for annotations in own_annotations(lab, ref):
                assert KUEUE.topology_annotation not in annotations
            steps = recorded_steps(store, incident_id)
            assert "annotating" not in steps
            assert steps.count("rollback_reactivated") == 1 and steps.count("rolled_back") == 1
            assert not any(s.startswith("rollback_") and s not in ("rollback_started", "rollback_reactivated")
                           for s in steps), steps  # fmt: skip
    finally:
        store.close()
