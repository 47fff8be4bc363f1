"""Crash safety: a Remediator process SIGKILLed right after each recorded step, then a fresh one
resumes from what the store recorded. The job ends remediated (or restored, on the rollback
path), never suspended, and never restarted twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from kubernetes import client

from agent.model.lifecycle import IncidentStatus
from agent.remediation.execute import Step
from agent.remediation.plan import Plan, TemplateState
from agent.store.repository import IncidentStore
from tests.remediation.harness import (
    FAST,
    Lab,
    approved_incident,
    migrated_template,
    new_store,
    running_lab,
)
from tests.remediation.test_execute import job, recorded_plan, resumes, split

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return migrated_template(tmp_path_factory.mktemp("db"))


def killed_at(lab: Lab, url: str, incident_id: int, step: str, *flags: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.remediation.kill_worker", str(lab.kubeconfig), url,
         str(incident_id), step, *flags],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == -signal.SIGKILL, (done.returncode, done.stdout, done.stderr[-2000:])


def recorded_steps(store: IncidentStore, incident_id: int) -> list[str]:
    return [str(a.payload.get("step")) for a in store.get_incident(incident_id).actions]


FORWARD = [Step.PLANNED, Step.DRY_RUN, Step.SUSPENDED, Step.PODS_GONE, Step.RESUMED, Step.BOUND,
           Step.VERIFIED]  # fmt: skip


@pytest.mark.parametrize("step", FORWARD, ids=[s.value for s in FORWARD])
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
            live = job(lab)
            assert live["spec"]["runPolicy"]["suspend"] is False
            assert recorded_plan(store, incident_id).targets[0].state_of(live) is TemplateState.PLANNED
            deadline = time.monotonic() + 30
            while resumes(lab) < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert resumes(lab) == 1  # restarted exactly once
            steps = recorded_steps(store, incident_id)
            assert steps.count("suspended") == 1 and steps.count("resumed") == 1
    finally:
        store.close()


def test_suspend_patch_that_landed_without_being_recorded_is_recognised(
    tmp_path: Path, template: Path
) -> None:
    """Killed between the suspend patch and its record: the next run sees the planned templates
    on a suspended job and carries on instead of patching again."""
    store, url = new_store(template, tmp_path)
    try:
        with running_lab(tmp_path, "seed-blocked") as lab:
            split(lab)
            incident_id = approved_incident(lab, store)
            killed_at(lab, url, incident_id, Step.DRY_RUN.value)
            plan: Plan = recorded_plan(store, incident_id)
            client.CustomObjectsApi(lab.api.api_client).patch_namespaced_custom_object(
                "kubeflow.org", "v1", "ml", "pytorchjobs", "llm-finetune",
                plan.job_patch(resource_version=None, suspend=True),
            )  # fmt: skip
            lab.reset_accounting()
            assert lab.remediator(store).run(incident_id) is IncidentStatus.RESOLVED
            assert lab.writes() == {"patch pytorchjobs": 1}  # only the resume
            assert "suspend patch found applied" in [
                a.message for a in store.get_incident(incident_id).actions
            ]
    finally:
        store.close()


ROLLBACK = [Step.SUSPENDED, Step.ROLLBACK_STARTED]


@pytest.mark.parametrize("step", ROLLBACK, ids=[s.value for s in ROLLBACK])
def test_killed_on_the_rollback_path_then_resumed_restores_the_job(
    tmp_path: Path, template: Path, step: Step
) -> None:
    store, url = new_store(template, tmp_path)
    try:
        with running_lab(tmp_path, "seed-degraded") as lab:
            split(lab)
            incident_id = approved_incident(lab, store)
            original = job(lab)
            killed_at(lab, url, incident_id, step.value, "--cordon-after-suspend")
            settings = replace(FAST, schedule_timeout=timedelta(seconds=1.5))
            status = lab.remediator(store, settings=settings).run(incident_id)
            assert status is IncidentStatus.ROLLED_BACK
            live = job(lab)
            assert live["spec"]["runPolicy"]["suspend"] is False
            for rtype, spec in live["spec"]["pytorchReplicaSpecs"].items():
                assert spec["template"] == original["spec"]["pytorchReplicaSpecs"][rtype]["template"]
            steps = recorded_steps(store, incident_id)
            assert steps.count("rollback_started") == 1 and steps.count("rolled_back") == 1
    finally:
        store.close()
