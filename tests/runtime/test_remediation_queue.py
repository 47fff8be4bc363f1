"""The leader's remediation executor over the real store (SQLite and PostgreSQL): approved
incidents go to the remediator one per tick, left-over remediations are resumed first, guards
refuse or defer, failures are retried after a pause."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agent.approval.approvers import Authority
from agent.approval.decision import DecisionRequest, decide
from agent.model.incident import Actor, IncidentQuery
from agent.model.job import JobRef
from agent.model.lifecycle import DecisionOutcome, DecisionSource, EventKind, IncidentStatus
from agent.model.verdict import Verdict
from agent.model.workload import JobKind
from agent.runtime.metrics import AgentMetrics
from agent.runtime.parts import Parts
from agent.runtime.remediation_queue import RemediationExecutor
from agent.runtime.root import remediation
from agent.settings import RemediationSettings, Settings
from agent.sources.cache import ClusterCache
from agent.sources.kubeapi import KubeApi, KubeApiError
from agent.store.repository import IncidentStore
from tests.runtime.step_remediator import StepRemediator
from tests.store.helpers import finding

S = IncidentStatus
ALICE = Actor("alice", None, DecisionSource.CLI)
AUTHORITY = Authority()  # no approvers configured: the CLI decides


class Clock:
    def __init__(self) -> None:
        self.now = datetime.now(UTC).replace(microsecond=0)
        self.mono = 1000.0

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
        self.mono += seconds


def _executor(store: IncidentStore, *, objects: Mapping[JobRef, Sequence[Mapping[str, Any]]]
              | None = None, cap: int = 10, cluster: str = "prod"
              ) -> tuple[RemediationExecutor, StepRemediator, Clock]:
    clock = Clock()
    remediator = StepRemediator(store, lambda: clock.now)
    executor = RemediationExecutor(
        store, remediator, cluster=cluster,
        settings=RemediationSettings(max_per_hour=cap, retry_after=timedelta(seconds=30)),
        protected_namespaces=["kube-system"],
        objects_of=lambda job: (objects or {}).get(job, []),
        now=lambda: clock.now, monotonic=lambda: clock.mono,
    )
    return executor, remediator, clock


def _approved(store: IncidentStore, name: str, *, namespace: str = "ml",
              cluster: str = "prod") -> int:
    incident_id = store.record_finding(finding(name, namespace=namespace,
                                               cluster=cluster)).incident.id
    result = decide(store, DecisionRequest(incident_id, DecisionOutcome.APPROVE, ALICE),
                    now=datetime.now(UTC), authority=AUTHORITY)
    assert result.recorded
    return incident_id


def _status(store: IncidentStore, incident_id: int) -> S:
    return store.get_incident(incident_id).incident.status


def test_approved_incidents_run_one_per_tick_in_order(store: IncidentStore) -> None:
    executor, remediator, _ = _executor(store)
    first, second = _approved(store, "a"), _approved(store, "b")
    other_cluster = _approved(store, "c", cluster="staging")
    assert executor.step() == first
    assert _status(store, first) is S.RESOLVED and _status(store, second) is S.APPROVED
    assert executor.step() == second
    assert executor.step() is None
    assert remediator.calls == [first, second]
    assert _status(store, other_cluster) is S.APPROVED  # another cluster's leader runs it


def test_protected_and_kueue_jobs_are_refused_with_the_reason_and_stay_open(
    store: IncidentStore,
) -> None:
    kueue_job = {"kind": "PyTorchJob", "metadata": {
        "name": "queued", "labels": {"kueue.x-k8s.io/queue-name": "gpus"}}}
    executor, remediator, _ = _executor(
        store, objects={JobRef(JobKind.PYTORCH, "ml", "queued"): [kueue_job]})
    protected = _approved(store, "sys", namespace="kube-system")
    queued = _approved(store, "queued")
    fine = _approved(store, "fine")
    assert executor.step() == fine
    assert remediator.calls == [fine]
    for incident_id, words in ((protected, "protected namespace kube-system"),
                               (queued, "queued by Kueue")):
        detail = store.get_incident(incident_id)
        assert detail.incident.status is S.REFUSED and detail.incident.closed_at is None
        refused = [e for e in detail.events if e.kind is EventKind.REFUSED]
        assert len(refused) == 1 and words in refused[0].detail["reason"]


def test_left_over_remediations_resume_first_and_ignore_the_cap(store: IncidentStore) -> None:
    executor, remediator, clock = _executor(store, cap=1)
    waiting = _approved(store, "waiting")
    left = _approved(store, "left")
    store.transition(left, S.APPROVED, S.REMEDIATING, actor="old-leader", now=clock.now)
    assert executor.step() == left  # resumed although the cap (1 started this hour) is reached
    assert _status(store, left) is S.RESOLVED
    assert executor.step() is None  # the cap: 1 remediation started in the last hour
    notes = [e for e in store.get_incident(waiting).events if e.kind is EventKind.NOTE]
    assert len(notes) == 1 and "the cap is 1" in notes[0].detail["waiting"]
    assert executor.step() is None
    assert len([e for e in store.get_incident(waiting).events
                if e.kind is EventKind.NOTE]) == 1  # said once, not at every tick
    clock.advance(3601)
    assert executor.step() == waiting
    assert remediator.calls == [left, waiting]


@pytest.mark.parametrize(
    ("error", "level", "traceback"),
    [
        (RuntimeError("a bug"), logging.ERROR, True),
        (KubeApiError(500, "Internal error occurred"), logging.WARNING, False),  # the API away
    ],
    ids=["bug", "unavailable"],
)
def test_a_failing_remediation_is_retried_after_a_pause(
    store: IncidentStore, caplog: pytest.LogCaptureFixture, error: Exception, level: int,
    traceback: bool,
) -> None:
    executor, remediator, clock = _executor(store)
    broken = _approved(store, "broken")
    remediator.fail.add(broken)
    remediator.error = lambda _: error
    with caplog.at_level(logging.INFO, logger="agent.runtime.remediation_queue"):
        assert executor.step() == broken
    (record,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert record.levelno == level and (record.exc_info is not None) is traceback
    if not traceback:  # one line that names the error
        assert str(error) in record.getMessage()
    assert executor.step() is None  # not at every tick
    clock.advance(29)
    assert executor.step() is None
    clock.advance(2)
    remediator.fail.clear()
    assert executor.step() == broken
    assert _status(store, broken) is S.RESOLVED
    assert remediator.calls == [broken, broken]


def test_one_remediation_in_flight_per_job(store: IncidentStore) -> None:
    """A job under remediation has no second incident to approve: what is seen meanwhile (its
    pods moving look like another verdict) folds into the incident being remediated, whose
    verdict stays the one decided on; it is remediated once."""
    executor, remediator, clock = _executor(store)
    split = _approved(store, "resnet")
    store.transition(split, S.APPROVED, S.REMEDIATING, actor="old-leader", now=clock.now)
    remediator.stop_early.add(split)  # the resumed remediation stops while still verifying
    assert executor.step() == split and _status(store, split) is S.VERIFYING
    seen = store.record_finding(finding("resnet", verdict=Verdict.POLICY_BLOCKED))
    assert (seen.new, seen.incident.id, seen.incident.verdict) == (
        False, split, Verdict.ZONE_SPLIT_BLOCKED)
    assert len(store.list_incidents(IncidentQuery(open_only=True)).incidents) == 1
    clock.advance(31)
    remediator.stop_early.clear()
    assert executor.step() == split and _status(store, split) is S.RESOLVED
    assert executor.step() is None
    assert remediator.calls.count(split) == 2  # resumed, then finished after its pause


@pytest.mark.parametrize(("enabled", "jobs"), [
    (True, ["remediation-executor", "approval-expiry"]),
    (False, ["approval-expiry"]),  # decisions are still recorded and expired; nothing executes
])
def test_registered_as_leader_gated_background_jobs(store: IncidentStore, enabled: bool,
                                                    jobs: list[str]) -> None:
    settings = Settings()
    settings = replace(settings, remediation=replace(settings.remediation, enabled=enabled))
    parts = Parts(settings=settings, playbooks=[], metrics=AgentMetrics(), cache=ClusterCache(),
                  api=KubeApi(None), prometheus=None, is_leader=lambda: True)
    clock = Clock()
    built = remediation(parts, store, StepRemediator(store, lambda: clock.now))
    assert [job.name for job in built.background_jobs] == jobs
    assert all(job.every == timedelta(seconds=1) for job in built.background_jobs)
