"""Crash safety of the Kubeflow path, and real SIGKILLs of both paths.

In process (the crash walk, `tests.remediation.crashes`): every point of a Kubeflow job's
remediation -- each step recorded, each write the server answered before its step is recorded --
killed, then resumed by a fresh Remediator; the same with the database refusing the record right
after each write landed; and every point of the rollback, the same two ways. The job ends remediated (or restored, on
the rollback path), never suspended, and never restarted twice.

Real SIGKILLs (a Remediator process, `tests.remediation.kill_worker`, killed with no cleanup at
all): after recorded steps of the Kubeflow path and its rollback, and right after a generic
group's DELETE and Deployment patch landed, before they were recorded. The group's point-by-point
walk is in `test_execute_group.py`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agent.model.lifecycle import IncidentStatus
from agent.remediation.group_steps import RECREATED_ANNOTATION
from agent.remediation.run import Step
from agent.remediation.template import TemplateState
from agent.remediation.writer import Write, WriteVerb
from tests.remediation.crashes import Death, SqliteLock, Walk
from tests.remediation.harness import (
    FAST,
    GROUPS,
    LAB,
    OUTAGE_BUDGET,
    Lab,
    add_zone_b_workers,
    approved_incident,
    cordon,
    lab_job,
    new_store,
    recorded_plan,
    recorded_steps,
    resumes,
    running_lab,
    served_job,
    split,
    zones,
)

ROOT = Path(__file__).resolve().parents[2]
SLOW_BIND = replace(FAST, schedule_timeout=timedelta(seconds=1.5))
JOB_WRITE = "patch PyTorchJob llm-finetune"


def killed_at(lab: Lab, url: str, incident_id: int, point: str, *flags: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.remediation.kill_worker", str(lab.kubeconfig), url,
         str(incident_id), point, *flags],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == -signal.SIGKILL, (done.returncode, done.stdout, done.stderr[-2000:])


def resumed_once(lab: Lab) -> bool:
    deadline = time.monotonic() + 30
    while resumes(lab) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    return resumes(lab) == 1


def walk_of(lab: Lab, store: Any, incident_id: int, death: Death, path: Path, *, settings: Any = FAST,
            on_step: Callable[[Step], None] = lambda _s: None) -> Walk:  # fmt: skip
    def make(walk_step: Callable[[Step], None], walk_write: Callable[[Write], None]) -> Any:
        def both(step: Step) -> None:
            on_step(step)
            walk_step(step)

        return lab.remediator(store, settings=settings, on_step=both, on_write=walk_write)

    only: Callable[[str], bool] = (lambda w: not w.startswith("step ")) if death is Death.STORE_AWAY else (lambda _w: True)
    return Walk(make, store, incident_id, death, outage=SqliteLock(str(path / "incidents.db")), only=only)


# ------------------------------------------------------------------------------------------------
# in process: every point


@pytest.mark.parametrize("death", [Death.KILL, Death.STORE_AWAY])
def test_every_point_of_the_kubeflow_path_stopped_then_resumed_remediates_once(
    tmp_path: Path, template: Path, death: Death
) -> None:
    store, _ = new_store(template, tmp_path, **OUTAGE_BUDGET)
    try:
        with running_lab(tmp_path, "seed-blocked") as lab:
            split(lab)
            incident_id = approved_incident(lab, store)
            walk = walk_of(lab, store, incident_id, death, tmp_path)
            assert walk.run() is IncidentStatus.RESOLVED, walk.outcomes
            expected = [JOB_WRITE, f"{JOB_WRITE} #2"]  # the suspend patch landed, the resume patch
            if death is Death.KILL:
                expected += ["step planned", "step dry_run", "step suspending patch llm-finetune",
                             "step suspended", "step pods_gone", "step resumed", "step bound",
                             "step verified"]  # fmt: skip
            for where in expected:
                assert where in walk.stops, (where, walk.stops)
            patches = [w for w in walk.writes if (w.verb, w.kind) == (WriteVerb.PATCH, "PyTorchJob")]
            assert len(patches) == 2  # one suspend, one resume, whatever the deaths
            live = served_job(lab)
            assert live["spec"]["runPolicy"]["suspend"] is False
            assert recorded_plan(store, incident_id).targets[0].state_of(live) is TemplateState.PLANNED
            assert resumed_once(lab)  # restarted exactly once
            steps = recorded_steps(store, incident_id)
            assert steps.count("suspended") == 1 and steps.count("resumed") == 1
    finally:
        store.close()


@pytest.mark.parametrize("death", [Death.KILL, Death.STORE_AWAY])
def test_every_point_of_the_kubeflow_rollback_killed_then_resumed_restores_the_job(
    tmp_path: Path, template: Path, death: Death
) -> None:
    store, _ = new_store(template, tmp_path, **OUTAGE_BUDGET)
    try:
        with running_lab(tmp_path, "seed-degraded") as lab:
            split(lab)
            incident_id = approved_incident(lab, store)
            original = served_job(lab)
            cordoned: list[bool] = []

            def on_step(step: Step) -> None:
                if step is Step.SUSPENDED and not cordoned:
                    cordon(lab, "us-east-1a")
                    cordoned.append(True)

            walk = walk_of(lab, store, incident_id, death, tmp_path, settings=SLOW_BIND, on_step=on_step)
            assert walk.run() is IncidentStatus.ROLLED_BACK, walk.outcomes
            expected = [f"{JOB_WRITE} #3", f"{JOB_WRITE} #4"]  # the restore patch, the resume
            if death is Death.KILL:
                expected += ["step rollback_started", "step restoring patch llm-finetune",
                             "step rollback_restored", "step rolled_back"]  # fmt: skip
            for where in expected:
                assert where in walk.stops, (where, walk.stops)
            patches = [w for w in walk.writes if (w.verb, w.kind) == (WriteVerb.PATCH, "PyTorchJob")]
            assert len(patches) == 4  # suspend, resume, restore, resume: each once, whatever the stops
            live = served_job(lab)
            assert live["spec"]["runPolicy"]["suspend"] is False
            for rtype, spec in live["spec"]["pytorchReplicaSpecs"].items():
                assert spec["template"] == original["spec"]["pytorchReplicaSpecs"][rtype]["template"]
            steps = recorded_steps(store, incident_id)
            assert steps.count("rollback_started") == 1 and steps.count("rolled_back") == 1
            assert steps.count("rollback_restored") == 1  # the rollback resumed past it, never again
    finally:
        store.close()


# ------------------------------------------------------------------------------------------------
# real SIGKILLs


SIGKILLED = [Step.PLANNED, Step.SUSPENDED, Step.RESUMED]


@pytest.mark.parametrize("step", SIGKILLED, ids=[s.value for s in SIGKILLED])
def test_killed_after_each_step_then_resumed_remediates_once(
    tmp_path: Path, template: Path, step: Step
) -> None:
    store, url = new_store(template, tmp_path)
    try:
        with running_lab(tmp_path, "seed-blocked") as lab:
            split(lab)
            incident_id = approved_incident(lab, store)
            killed_at(lab, url, incident_id, step.value)
            assert step.value in recorded_steps(store, incident_id)
            status = lab.remediator(store).run(incident_id)
            assert status is IncidentStatus.RESOLVED
            live = served_job(lab)
            assert live["spec"]["runPolicy"]["suspend"] is False
            assert recorded_plan(store, incident_id).targets[0].state_of(live) is TemplateState.PLANNED
            assert resumed_once(lab)  # restarted exactly once
            steps = recorded_steps(store, incident_id)
            assert steps.count("suspended") == 1 and steps.count("resumed") == 1
    finally:
        store.close()


def test_killed_on_the_rollback_path_then_resumed_restores_the_job(tmp_path: Path, template: Path) -> None:
    store, url = new_store(template, tmp_path)
    try:
        with running_lab(tmp_path, "seed-degraded") as lab:
            split(lab)
            incident_id = approved_incident(lab, store)
            original = served_job(lab)
            killed_at(lab, url, incident_id, Step.ROLLBACK_STARTED.value, "--cordon-after-suspend")
            status = lab.remediator(store, settings=SLOW_BIND).run(incident_id)
            assert status is IncidentStatus.ROLLED_BACK
            live = served_job(lab)
            assert live["spec"]["runPolicy"]["suspend"] is False
            for rtype, spec in live["spec"]["pytorchReplicaSpecs"].items():
                assert spec["template"] == original["spec"]["pytorchReplicaSpecs"][rtype]["template"]
            steps = recorded_steps(store, incident_id)
            assert steps.count("rollback_started") == 1 and steps.count("rolled_back") == 1
    finally:
        store.close()


@pytest.mark.parametrize("point", ["wrote:delete:Job", "wrote:patch:Deployment"])
def test_sigkilled_right_after_a_group_write_landed_then_resumed_ends_remediated(
    tmp_path: Path, template: Path, point: str
) -> None:
    """Killed between the write's answer and its record: the next run reads the deleted Job as
    deleted (and creates it from the plan) and the patched template as patched, instead of
    "healthy since the plan" or "nothing written"."""
    store, url = new_store(template, tmp_path)
    try:
        with running_lab(tmp_path, "lab", diagnosis=GROUPS) as lab:
            original = add_zone_b_workers(lab)
            incident_id = approved_incident(lab, store, ref=LAB)
            killed_at(lab, url, incident_id, point, "--lab")
            intent = "job_deleting" if point == "wrote:delete:Job" else "rolling_out"
            assert recorded_steps(store, incident_id)[-1] == intent  # the write landed unrecorded
            status = lab.remediator(store).run(incident_id)
            detail = store.get_incident(incident_id)
            assert status is IncidentStatus.RESOLVED, [dict(e.detail) for e in detail.events][-3:]
            found = lab_job(lab, "llm-workers-b")
            assert found is not None and found["metadata"]["uid"] != original["metadata"]["uid"]
            assert found["metadata"]["annotations"][RECREATED_ANNOTATION] == f"incident/{incident_id}/planned"
            assert set(zones(lab).values()) == {"zone-a"}
            steps = recorded_steps(store, incident_id)
            assert steps.count("rolled_out") == 1 and steps.count("job_deleted") == 1
            assert steps.count("job_created") == 1
    finally:
        store.close()
