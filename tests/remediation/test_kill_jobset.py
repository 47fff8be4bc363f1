"""Crash safety of the TrainJob and JobSet path, in process and with real SIGKILLs.

In process (the crash walk, `tests.remediation.crashes`): every point of the remediation of a
TrainJob on Trainer v2.3 (suspend; patch and resume in one request), on v2.2 (suspend; patch;
resume: the MPI launcher moved alone) and of a JobSet -- each step recorded, each write the
server answered before its step is recorded -- killed, then resumed by a fresh Remediator; the
same with the database refusing the record right after each write landed; and every point of a
TrainJob's rollback, the same two ways (suspend again, zonemedic's entry out, the child Job that keeps the zone key
deleted for the JobSet to recreate, resume). The job ends remediated (or restored), never
suspended, each write sent once, and never restarted twice.

Real SIGKILLs (a Remediator process, `tests.remediation.kill_worker`, killed with no cleanup): right
after each write of a TrainJob's remediation landed, before it was recorded, and after its
recorded steps; on its rollback, when it starts and right after a stale child Job's DELETE landed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agent.model.job import JobRef
from agent.model.lifecycle import IncidentStatus
from agent.model.workload import JobKind, workload
from agent.remediation import jobset_patch
from agent.remediation.run import Step
from agent.remediation.template import TemplateState
from agent.remediation.writer import Write, WriteVerb
from agent.twin.crds import TrainerRelease
from agent.twin.resources import lookup
from agent.twin.scenario import Scenario
from tests.remediation.crashes import Death, SqliteLock, Walk
from tests.remediation.harness import (
    FAST,
    OUTAGE_BUDGET,
    ZONE,
    Lab,
    approved_incident,
    cordon,
    new_store,
    quick,
    recorded_plan,
    recorded_steps,
    running_lab,
)

ROOT = Path(__file__).resolve().parents[2]
SLOW_BIND = replace(FAST, schedule_timeout=timedelta(seconds=1.5))
TORCH = JobRef(JobKind.TRAINJOB, "ml", "llm-pretrain")
MPI = JobRef(JobKind.TRAINJOB, "ml", "mpi-pretrain")
JOBSET = JobRef(JobKind.JOBSET, "ml", "pytorch-ddp")


def scenario(name: str, release: TrainerRelease = TrainerRelease.V2_3) -> Scenario:
    return replace(quick(name), trainer_release=release)


def served(lab: Lab, ref: JobRef) -> dict[str, Any]:
    kind = workload(ref.kind)
    found: dict[str, Any] = lab.api.json(
        "GET", f"/apis/{kind.api_version}/namespaces/{ref.namespace}/{kind.plural}/{ref.name}")
    return found


def resumes(lab: Lab) -> int:
    """How many times the job's JobSet resumed its Jobs (the JobSet controller's events)."""
    events = lab.cluster.store.list(lookup("events"), namespace="ml")[0]
    return sum(int(e.get("count", 1)) for e in events if e.get("reason") == "ResumeJobs")


def walk_of(lab: Lab, store: Any, incident_id: int, death: Death, path: Path, *, settings: Any = FAST,
            on_step: Callable[[Step], None] = lambda _s: None) -> Walk:  # fmt: skip
    def make(walk_step: Callable[[Step], None], walk_write: Callable[[Write], None]) -> Any:
        def both(step: Step) -> None:
            on_step(step)
            walk_step(step)

        return lab.remediator(store, settings=settings, on_step=both, on_write=walk_write)

    only: Callable[[str], bool] = (lambda w: not w.startswith("step ")) if death is Death.STORE_AWAY else (lambda _w: True)
    return Walk(make, store, incident_id, death, outage=SqliteLock(str(path / "incidents.db")), only=only)


def assert_remediated_once(lab: Lab, store: Any, incident_id: int, ref: JobRef) -> None:
    live = served(lab, ref)
    assert live["spec"].get("suspend") is False
    (target,) = recorded_plan(store, incident_id).targets
    assert jobset_patch.override_state(target, live) is TemplateState.PLANNED
    assert lab.cluster.wait_until(lambda: resumes(lab) >= 1, timeout=30)
    assert resumes(lab) == 1  # restarted exactly once
    steps = recorded_steps(store, incident_id)
    assert steps.count("suspended") == 1 and steps.count("patched") == 1 and steps.count("resumed") == 1


# ------------------------------------------------------------------------------------------------
# in process: every point

PATHS = [
    # scenario, release, job, the writes landed (suspend, patch [+ resume], resume)
    ("trainjob", TrainerRelease.V2_3, TORCH, 2),
    ("trainjob-mpi", TrainerRelease.V2_2, MPI, 3),
    ("jobset", TrainerRelease.V2_3, JOBSET, 2),
]


@pytest.mark.parametrize("death", [Death.KILL, Death.STORE_AWAY])
@pytest.mark.parametrize(("name", "release", "ref", "writes"), PATHS, ids=["torch-v2.3", "mpi-v2.2", "jobset"])
def test_every_point_of_the_path_stopped_then_resumed_remediates_once(
    tmp_path: Path, template: Path, death: Death, name: str, release: TrainerRelease, ref: JobRef,
    writes: int,
) -> None:  # fmt: skip
    store, _ = new_store(template, tmp_path, **OUTAGE_BUDGET)
    try:
        with running_lab(tmp_path, scenario(name, release)) as lab:
            incident_id = approved_incident(lab, store, ref=ref)
            walk = walk_of(lab, store, incident_id, death, tmp_path)
            assert walk.run() is IncidentStatus.RESOLVED, walk.outcomes
            write = f"patch {ref.kind.value} {ref.name}"
            expected = [write, *(f"{write} #{n}" for n in range(2, writes + 1))]
            if death is Death.KILL:
                expected += ["step planned", "step dry_run", f"step suspending patch {ref.name}",
                             "step suspended", "step pods_gone", f"step patching patch {ref.name}",
                             "step patched", "step resumed", "step bound", "step verified"]  # fmt: skip
            for where in expected:
                assert where in walk.stops, (where, walk.stops)
            sent = [w for w in walk.writes if (w.verb, w.kind) == (WriteVerb.PATCH, ref.kind.value)]
            assert len(sent) == writes  # each write once, whatever the deaths
            assert_remediated_once(lab, store, incident_id, ref)
    finally:
        store.close()


@pytest.mark.parametrize("death", [Death.KILL, Death.STORE_AWAY])
def test_every_point_of_a_trainjob_rollback_killed_then_resumed_restores_it(
    tmp_path: Path, template: Path, death: Death
) -> None:
    store, _ = new_store(template, tmp_path, **OUTAGE_BUDGET)
    try:
        with running_lab(tmp_path, scenario("trainjob")) as lab:
            incident_id = approved_incident(lab, store, ref=TORCH)
            cordoned: list[bool] = []

            def on_step(step: Step) -> None:
                if step is Step.PODS_GONE and not cordoned:
                    cordon(lab, recorded_plan(store, incident_id).target_zone)
                    cordoned.append(True)

            walk = walk_of(lab, store, incident_id, death, tmp_path, settings=SLOW_BIND, on_step=on_step)
            assert walk.run() is IncidentStatus.ROLLED_BACK, walk.outcomes
            write = "patch TrainJob llm-pretrain"
            expected = [f"{write} #3", f"{write} #4", "delete Job llm-pretrain-node-0", f"{write} #5"]
            if death is Death.KILL:
                expected += ["step rollback_started", "step restoring suspend llm-pretrain",
                             "step restoring restore llm-pretrain",
                             "step restoring delete llm-pretrain-node-0", "step rollback_pods_gone",
                             "step rollback_restored", "step rollback_renewed", "step rolled_back"]  # fmt: skip
            for where in expected:
                assert where in walk.stops, (where, walk.stops)
            sent = [w for w in walk.writes if not w.dry_run]
            assert [(w.verb.value, w.kind) for w in sent].count(("delete", "Job")) == 1
            assert len([w for w in sent if w.kind == "TrainJob"]) == 5  # each once
            live = served(lab, TORCH)
            assert live["spec"].get("suspend") is False and not live["spec"].get("runtimePatches")
            jobs = lab.api.json("GET", "/apis/batch/v1/namespaces/ml/jobs")["items"]
            node = [j for j in jobs if j["metadata"]["name"] == "llm-pretrain-node-0"]
            assert node and ZONE not in (node[0]["spec"]["template"]["spec"].get("nodeSelector") or {})
            steps = recorded_steps(store, incident_id)
            assert steps.count("rollback_started") == 1 and steps.count("rolled_back") == 1
            for step in ("rollback_pods_gone", "rollback_restored", "rollback_renewed"):
                assert steps.count(step) == 1, (step, steps)  # each rollback step once
    finally:
        store.close()


# ------------------------------------------------------------------------------------------------
# real SIGKILLs


def killed_at(lab: Lab, url: str, incident_id: int, point: str, *flags: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.remediation.kill_worker", str(lab.kubeconfig), url,
         str(incident_id), point, *flags],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == -signal.SIGKILL, (done.returncode, done.stdout, done.stderr[-2000:])


# each write of a v2.2 TrainJob's path (suspend, patch, resume) right after it landed, and its steps
SIGKILLED = [("wrote:patch:TrainJob", "suspending"), ("wrote:patch:TrainJob#2", "patching"),
             ("wrote:patch:TrainJob#3", "patched"), (Step.SUSPENDED.value, "suspended"),
             (Step.PATCHED.value, "patched"), (Step.RESUMED.value, "resumed")]  # fmt: skip


@pytest.mark.parametrize(("point", "last"), SIGKILLED, ids=[p for p, _ in SIGKILLED])
def test_sigkilled_at_each_point_then_resumed_remediates_once(
    tmp_path: Path, template: Path, point: str, last: str
) -> None:
    store, url = new_store(template, tmp_path)
    try:
        with running_lab(tmp_path, scenario("trainjob", TrainerRelease.V2_2)) as lab:
            incident_id = approved_incident(lab, store, ref=TORCH)
            killed_at(lab, url, incident_id, point)
            assert recorded_steps(store, incident_id)[-1] == last  # the write landed unrecorded
            status = lab.remediator(store).run(incident_id)
            assert status is IncidentStatus.RESOLVED
            assert_remediated_once(lab, store, incident_id, TORCH)
    finally:
        store.close()


@pytest.mark.parametrize("point", [Step.ROLLBACK_STARTED.value, "wrote:delete:Job"])
def test_sigkilled_on_the_rollback_path_then_resumed_restores_the_trainjob(
    tmp_path: Path, template: Path, point: str
) -> None:
    """The target zone cordoned once the suspend is recorded: the new pods cannot bind, the run
    rolls back and is killed when the rollback starts, or right after the stale child Job's
    DELETE landed before its record; a fresh run restores the TrainJob."""
    store, url = new_store(template, tmp_path)
    try:
        with running_lab(tmp_path, scenario("trainjob", TrainerRelease.V2_2)) as lab:
            incident_id = approved_incident(lab, store, ref=TORCH)
            killed_at(lab, url, incident_id, point, "--cordon-after-suspend")
            if point.startswith("wrote:"):  # the DELETE landed, its record not made
                assert recorded_steps(store, incident_id)[-1] == "restoring"
            assert recorded_plan(store, incident_id).target_zone == "us-east-1a"  # the one cordoned
            status = lab.remediator(store, settings=SLOW_BIND).run(incident_id)
            assert status is IncidentStatus.ROLLED_BACK
            live = served(lab, TORCH)
            assert live["spec"].get("suspend") is False and not live["spec"].get("runtimePatches")
            jobs = lab.api.json("GET", "/apis/batch/v1/namespaces/ml/jobs")["items"]
            node = [j for j in jobs if j["metadata"]["name"] == "llm-pretrain-node-0"]
            assert node and ZONE not in (node[0]["spec"]["template"]["spec"].get("nodeSelector") or {})
            steps = recorded_steps(store, incident_id)
            assert steps.count("rollback_started") == 1 and steps.count("rolled_back") == 1
    finally:
        store.close()
