"""The soak's guarantee checks can fail: each is fed a recorded history (a real SQLite store, the
twin's write log and events as data) that breaks it, and one that keeps it."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agent.model.incident import Actor, FindingRecord
from agent.model.lifecycle import (
    DecisionOutcome,
    DecisionSource,
    IncidentStatus,
    MessageKind,
    RemediationActionKind,
)
from agent.remediation.group_steps import RECREATED_ANNOTATION
from agent.store.repository import IncidentStore
from agent.twin.faults import WriteRecord
from tests.chatops.harness import diagnosis
from tests.soak.approvers import Click
from tests.soak.faults import Struck
from tests.soak.guarantees import NOW_FIXABLE, Report, check
from tests.soak.workload import PROTECTED, ZONE, GroupShape, JobRecord

AGENT = "system:serviceaccount:zonemedic:zonemedic"
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def incident(store: IncidentStore, namespace: str, name: str, *, approver: str | None,
             ends: IncidentStatus = IncidentStatus.RESOLVED, uid: str | None = "",
             at: datetime = T0) -> int:
    """An incident of NAMESPACE/NAME (its uid `uid-NAME`, or `uid` when given: None records it
    without one) opened at `at`, approved by `approver` (1 s on) and ending `ends` (3 s on), or
    awaiting approval."""
    doc = diagnosis(name)
    doc["job"].update(namespace=namespace, uid=f"uid-{name}" if uid == "" else uid)
    found = store.record_finding(FindingRecord.from_finding(doc, cluster="soak", detected_at=at,
                                                            gpus=4)).incident.id
    assert store.transition(found, IncidentStatus.OPEN, IncidentStatus.AWAITING_APPROVAL,
                            actor="zonemedic", now=at).applied
    if approver is not None:
        assert store.record_decision(found, DecisionOutcome.APPROVE,
                                     actor=Actor(approver, approver, DecisionSource.SLACK),
                                     now=at + timedelta(seconds=1)).applied
        steps = [IncidentStatus.APPROVED, IncidentStatus.REMEDIATING,
                 *([IncidentStatus.VERIFYING] if ends is IncidentStatus.RESOLVED else []), ends]
        for before, after in itertools.pairwise(steps):
            assert store.transition(found, before, after, actor="zonemedic",
                                    now=at + timedelta(seconds=3)).applied
    return found


def write(namespace: str, name: str, *, after: float) -> WriteRecord:
    return WriteRecord((T0 + timedelta(seconds=after)).timestamp(), AGENT, "patch",
                       "kubeflow.org", "pytorchjobs", namespace, name, False)


def run(store: IncidentStore, **given: Any) -> Report:
    base: dict[str, Any] = {
        "store": store, "writes": [], "agent_user": AGENT, "jobs": [], "split_seen": {},
        "clicks": [], "twin_events": [], "live_jobs": [], "caches": {"r": 'zonemedic_cache_objects{resource="pods"} 3.0\n'},
        "twin_counts": {"pods": 3},
    }
    return check(**{**base, **given})


def test_a_clean_history_keeps_every_guarantee(store: IncidentStore) -> None:
    incident(store, "soak-0", "a", approver="U1")
    report = run(store, writes=[write("soak-0", "a", after=2)],
                 twin_events=[{"reason": "PyTorchJobSuspended", "count": 1,
                               "involvedObject": {"uid": "uid-a"}}])
    assert report.violated == 0, report.lines()


def struck(kind: str, name: str = "a") -> Struck:
    """A fault that struck the agents' write of soak-0/NAME right as its remediation started."""
    return Struck(kind, "soak-0", name, "patch", (T0 + timedelta(seconds=3)).timestamp())


def live_job(name: str, *, pinned: bool, suspended: bool = False) -> dict[str, Any]:
    selector = {ZONE: "us-east-1b"} if pinned else {}
    return {"metadata": {"namespace": "soak-0", "name": name},
            "spec": {"runPolicy": {"suspend": suspended}, "pytorchReplicaSpecs": {
                "Worker": {"template": {"spec": {"nodeSelector": selector}}}}}}


@pytest.mark.parametrize(
    ("kind", "ends", "pinned", "deleted"),
    [
        ("record_refused", IncidentStatus.RESOLVED, True, False),
        ("leader_pause", IncidentStatus.RESOLVED, True, False),
        ("record_refused", IncidentStatus.SUPERSEDED, False, True),  # the job was deleted
        ("admission_refused", IncidentStatus.ROLLED_BACK, False, False),
        ("admission_refused", IncidentStatus.FAILED, False, False),
    ],
)
def test_a_struck_remediation_that_ends_as_one_keeps_guarantee_6(
    store: IncidentStore, kind: str, ends: IncidentStatus, pinned: bool, deleted: bool
) -> None:
    incident(store, "soak-0", "a", approver="U1", ends=ends)
    jobs = [JobRecord("soak-0", "a", "uid-a", 0.0, kueue=False,
                      deleted=(T0 + timedelta(seconds=5)).timestamp() if deleted else None)]
    report = run(store, struck=[struck(kind)], jobs=jobs,
                 live_jobs=[] if deleted else [live_job("a", pinned=pinned)])
    assert report.violated == 0, report.lines()
    assert report.counts["faults struck"] == {kind: 1}


@pytest.mark.parametrize(
    ("kind", "ends", "pinned", "suspended"),
    [
        ("record_refused", IncidentStatus.SUPERSEDED, False, False),  # "healthy", the job still there
        ("admission_refused", IncidentStatus.RESOLVED, True, False),
        ("admission_refused", IncidentStatus.ROLLED_BACK, True, False),  # the pin left on
        ("leader_pause", IncidentStatus.RESOLVED, False, False),  # a late write undid the pin
        ("leader_pause", IncidentStatus.RESOLVED, True, True),
        ("record_refused", None, False, False),  # no incident was remediating
    ],
)
def test_a_struck_remediation_not_ended_as_one_is_reported(
    store: IncidentStore, kind: str, ends: IncidentStatus | None, pinned: bool, suspended: bool
) -> None:
    if ends is not None:
        incident(store, "soak-0", "a", approver="U1", ends=ends)
    report = run(store, struck=[struck(kind)],
                 live_jobs=[live_job("a", pinned=pinned, suspended=suspended)],
                 jobs=[JobRecord("soak-0", "a", "uid-a", 0.0, kueue=False)])
    assert "6 struck" in report.violations, report.lines()


@pytest.mark.parametrize(
    ("case", "guarantee"),
    [
        ("write_without_approval", "1 approval"),
        ("write_before_the_approval", "1 approval"),
        ("approved_by_a_non_approver", "1 approval"),
        ("write_in_the_protected_namespace", "1 approval"),
        ("write_on_a_kueue_job", "1 approval"),
        ("suspended_twice_for_one_approval", "2 once"),
        ("job_left_suspended", "3 not suspended"),
        ("split_long_without_incident", "4 nothing lost"),
        ("approved_click_still_awaiting", "4 nothing lost"),
        ("cache_differs", "5 cache"),
    ],
)
def test_a_broken_guarantee_is_reported(store: IncidentStore, case: str, guarantee: str) -> None:
    given: dict[str, Any] = {}
    if case == "write_without_approval":
        incident(store, "soak-0", "a", approver=None)
        given["writes"] = [write("soak-0", "a", after=2)]
    elif case == "write_before_the_approval":
        incident(store, "soak-0", "a", approver="U1")
        given["writes"] = [write("soak-0", "a", after=0.5)]
    elif case == "approved_by_a_non_approver":
        incident(store, "soak-0", "a", approver="U9")
    elif case == "write_in_the_protected_namespace":
        incident(store, PROTECTED, "a", approver="U1")
        given["writes"] = [write(PROTECTED, "a", after=2)]
    elif case == "write_on_a_kueue_job":
        incident(store, "soak-0", "a", approver="U1")
        given["writes"] = [write("soak-0", "a", after=2)]
        given["jobs"] = [JobRecord("soak-0", "a", "uid-a", 0.0, kueue=True)]
    elif case == "suspended_twice_for_one_approval":
        incident(store, "soak-0", "a", approver="U1")
        given["twin_events"] = [{"reason": "PyTorchJobSuspended", "count": 2,
                                 "involvedObject": {"uid": "uid-a"}}]
    elif case == "job_left_suspended":
        given["live_jobs"] = [{"metadata": {"namespace": "soak-0", "name": "a"},
                               "spec": {"runPolicy": {"suspend": True}}}]
    elif case == "split_long_without_incident":
        given["split_seen"] = {("soak-0", "a"): (100.0, 130.0)}
    elif case == "approved_click_still_awaiting":
        found = incident(store, "soak-0", "a", approver=None)
        given["clicks"] = [Click(0.0, "U1", "zonemedic_approve", found, 200)]
    else:
        given["twin_counts"] = {"pods": 4}
    report = run(store, **given)
    assert list(report.violations) == [guarantee], report.lines()


@pytest.mark.parametrize(
    ("queued_after", "cutoff_after", "violated"),
    [
        (10, 20, True),  # queued before every message was seen delivered: it had its wait
        (30, 20, False),  # queued after that moment (the agents go on queueing): not waited for
        (30, None, True),  # never seen all delivered: every pending message counts
    ],
)
def test_a_pending_message_counts_only_when_queued_before_the_delivery_wait_ended(
    store: IncidentStore, queued_after: int, cutoff_after: int | None, violated: bool
) -> None:
    found = incident(store, "soak-0", "a", approver=None)
    store.enqueue_message(MessageKind.UPDATE, payload={"text": "update"}, incident_id=found,
                          now=T0 + timedelta(seconds=queued_after))  # fmt: skip
    cutoff = None if cutoff_after is None else T0 + timedelta(seconds=cutoff_after)
    report = run(store, queued_before=cutoff)
    assert ("4 nothing lost" in report.violations) is violated, report.lines()
    assert report.counts["pending, queued after the delivery wait"] == (0 if violated else 1)


@pytest.mark.parametrize(("approver", "violated"), [("U1", False), (None, True)])
def test_an_incident_recorded_without_the_uid_counts_for_the_job_of_its_name(
    store: IncidentStore, approver: str | None, violated: bool
) -> None:
    """The job's object reached the agent's cache after its pods: its incident has no uid. Its
    remediation's resume counts for the job of that name; a resume no approved incident of the
    job accounts for is still reported, naming the job."""
    incident(store, "soak-0", "a", approver=approver, uid=None)
    report = run(store, jobs=[JobRecord("soak-0", "a", "uid-a", 0.0, kueue=False)],
                 twin_events=[{"reason": "PyTorchJobResumed", "count": 1,
                               "involvedObject": {"uid": "uid-a"}}])
    assert ("2 once" in report.violations) is violated, report.lines()
    if violated:
        assert "soak-0/a (uid-a)" in report.violations["2 once"][0]
    assert report.counts["approved incidents recorded without the job's uid"] == (0 if violated else 1)


def group_workloads(name: str, *, workers: bool = True, coordinator: bool = True,
                    generation: int = 1, stamp: str | None = None,
                    pinned: bool = False) -> list[dict[str, Any]]:
    """The live Deployment and worker Job of soak-0/NAME (a group), as the twin lists them."""
    selector = {ZONE: "us-east-1a"} if pinned else {}
    out: list[dict[str, Any]] = []
    if coordinator:
        out.append({"kind": "Deployment", "metadata": {
            "namespace": "soak-0", "name": f"{name}-coord", "generation": generation},
            "spec": {"template": {"spec": {}}}})  # fmt: skip
    if workers:
        annotations = {RECREATED_ANNOTATION: stamp} if stamp else {}
        out.append({"kind": "Job", "metadata": {
            "namespace": "soak-0", "name": f"{name}-workers", "annotations": annotations},
            "spec": {"template": {"spec": {"nodeSelector": selector}}}})  # fmt: skip
    return out


def group_record(name: str, *, kueue: bool = False, deleted: float | None = None) -> JobRecord:
    return JobRecord("soak-0", name, f"uid-{name}-workers", 0.0, kueue, deleted=deleted,
                     kind="Group", shape=GroupShape.RECREATE)


def created(name: str, *uids: str) -> list[dict[str, Any]]:
    """The batch Job controller's SuccessfulCreate events of the Jobs `uids` of group NAME."""
    return [{"reason": "SuccessfulCreate", "count": 2, "involvedObject": {
        "kind": "Job", "namespace": "soak-0", "name": f"{name}-workers", "uid": uid}}
        for uid in uids]  # fmt: skip


def group_write(name: str, verb: str, *, after: float) -> WriteRecord:
    resource, obj = ("deployments", f"{name}-coord") if verb == "patch" else ("jobs", f"{name}-workers")
    return WriteRecord((T0 + timedelta(seconds=after)).timestamp(), AGENT, verb,
                       "apps" if verb == "patch" else "batch", resource, "soak-0", obj, False)


def test_a_clean_group_history_keeps_every_guarantee(store: IncidentStore) -> None:
    """A group remediated once (its worker Job deleted and created from the plan, annotated so)
    and another rolled back after its recreated Job's CREATE was refused keep every check."""
    first = incident(store, "soak-0", "grp-1", approver="U1")
    incident(store, "soak-0", "grp-2", approver="U1", ends=IncidentStatus.ROLLED_BACK)
    refused = Struck("admission_refused", "soak-0", "grp-2-workers", "create",
                     (T0 + timedelta(seconds=3)).timestamp())
    report = run(
        store, jobs=[group_record("grp-1"), group_record("grp-2")],
        writes=[group_write("grp-1", "delete", after=2), group_write("grp-2", "delete", after=2)],
        twin_events=[*created("grp-1", "uid-grp-1-workers", "uid-new"),
                     *created("grp-2", "uid-grp-2-workers", "uid-original-again")],
        live_workloads=[*group_workloads("grp-1", stamp=f"incident/{first}/planned", pinned=True),
                        *group_workloads("grp-2", stamp="incident/2/original")],
        struck=[refused],
    )  # fmt: skip
    assert report.violated == 0, report.lines()
    assert report.counts["faults struck on groups"] == {"admission_refused": 1}


@pytest.mark.parametrize(
    ("case", "guarantee"),
    [
        ("workers_left_deleted", "3 not suspended"),
        ("coordinator_left_deleted", "3 not suspended"),
        ("recreated_twice_for_one_approval", "2 once"),
        ("rolled_out_twice_for_one_approval", "2 once"),
        ("delete_without_approval", "1 approval"),
        ("patch_on_a_kueue_group", "1 approval"),
        ("created_for_an_unapproved_incident", "1 approval"),
        ("refused_create_ended_failed", "6 struck"),
        ("refused_create_rolled_back_pinned", "6 struck"),
        ("split_group_without_incident", "4 nothing lost"),
    ],
)
def test_a_broken_group_guarantee_is_reported(store: IncidentStore, case: str,
                                              guarantee: str) -> None:
    given: dict[str, Any] = {"jobs": [group_record("grp-1")],
                             "live_workloads": group_workloads("grp-1")}
    refused = Struck("admission_refused", "soak-0", "grp-1-workers", "create",
                     (T0 + timedelta(seconds=3)).timestamp())
    if case == "workers_left_deleted":
        incident(store, "soak-0", "grp-1", approver="U1", ends=IncidentStatus.FAILED)
        given["live_workloads"] = group_workloads("grp-1", workers=False)
    elif case == "coordinator_left_deleted":
        given["live_workloads"] = group_workloads("grp-1", coordinator=False)
    elif case == "recreated_twice_for_one_approval":
        incident(store, "soak-0", "grp-1", approver="U1")
        given["twin_events"] = created("grp-1", "uid-grp-1-workers", "uid-b", "uid-c")
    elif case == "rolled_out_twice_for_one_approval":
        incident(store, "soak-0", "grp-1", approver="U1")
        given["live_workloads"] = group_workloads("grp-1", generation=3)
    elif case == "delete_without_approval":
        incident(store, "soak-0", "grp-1", approver=None)
        given["writes"] = [group_write("grp-1", "delete", after=2)]
    elif case == "patch_on_a_kueue_group":
        incident(store, "soak-0", "grp-1", approver="U1")
        given["writes"] = [group_write("grp-1", "patch", after=2)]
        given["jobs"] = [group_record("grp-1", kueue=True)]
    elif case == "created_for_an_unapproved_incident":
        found = incident(store, "soak-0", "grp-1", approver=None)
        given["live_workloads"] = group_workloads("grp-1", stamp=f"incident/{found}/planned")
    elif case == "refused_create_ended_failed":
        incident(store, "soak-0", "grp-1", approver="U1", ends=IncidentStatus.FAILED)
        given["struck"] = [refused]
    elif case == "refused_create_rolled_back_pinned":
        incident(store, "soak-0", "grp-1", approver="U1", ends=IncidentStatus.ROLLED_BACK)
        given["struck"] = [refused]
        given["live_workloads"] = group_workloads("grp-1", pinned=True)
    else:
        given["split_seen"] = {("soak-0", "grp-1"): (100.0, 130.0)}
    report = run(store, **given)
    assert list(report.violations) == [guarantee], report.lines()


@pytest.mark.parametrize(("second_after", "violated"), [(5, False), (1, True)])
def test_two_incidents_of_one_group_open_at_once_are_reported(
    store: IncidentStore, second_after: int, violated: bool
) -> None:
    """The first incident closes 3 s after it opened; a second one opened before that is a
    second incident for the same problem."""
    incident(store, "soak-0", "grp-1", approver="U1")
    incident(store, "soak-0", "grp-1", approver=None, at=T0 + timedelta(seconds=second_after))
    report = run(store, jobs=[group_record("grp-1")], live_workloads=group_workloads("grp-1"))
    assert ("7 one incident" in report.violations) is violated, report.lines()
    assert report.violated == (1 if violated else 0), report.lines()


def _job(name: str, *, kueue: bool = False, namespace: str = "soak-0") -> JobRecord:
    return JobRecord(namespace, name, f"uid-{name}", T0.timestamp(), kueue)


@pytest.mark.parametrize(
    ("case", "violated"),
    [
        ("refused_then_reopened", True),  # today's main: failed by the guard, a new incident
        ("recreated", False),  # the later incident is another job (another uid)
        ("another_class", False),  # the later incident is another problem
        ("written_then_failed", False),  # a remediation that wrote, then failed: not a refusal
        ("refused_kept_open", False),  # the fix: refused, one open incident
    ],
)
def test_a_new_incident_for_a_refused_unchanged_split_is_reported(
    store: IncidentStore, case: str, violated: bool
) -> None:
    """The first incident is approved and ends 3 s after it opened; the second opens at 5 s."""
    later = T0 + timedelta(seconds=5)
    if case == "refused_kept_open":
        first = incident(store, "soak-0", "a", approver="U1", ends=IncidentStatus.REFUSED)
        assert store.get_incident(first).incident.closed_at is None
    else:
        first = incident(store, "soak-0", "a", approver="U1", ends=IncidentStatus.FAILED)
    if case == "written_then_failed":
        store.record_action(first, RemediationActionKind.APPLY, now=T0 + timedelta(seconds=2),
                            actor="zonemedic", succeeded=None, payload={"step": "suspending"})
    if case in ("refused_then_reopened", "written_then_failed"):
        incident(store, "soak-0", "a", approver=None, at=later)
    elif case == "recreated":
        incident(store, "soak-0", "a", approver=None, at=later, uid="uid-a-again")
    elif case == "another_class":
        doc = diagnosis("a")
        doc["job"].update(namespace="soak-0", uid="uid-a")
        doc.update(verdict="policy_blocked", remediable=False, target_zone=None)
        store.record_finding(FindingRecord.from_finding(doc, cluster="soak", detected_at=later))
    report = run(store, jobs=[_job("a")])
    assert ("7 one incident" in report.violations) is violated, report.lines()
    assert report.violated == (1 if violated else 0), report.lines()


@pytest.mark.parametrize(("kueue", "violated"), [(True, True), (False, False)])
def test_a_refused_incident_left_as_fixable_on_a_job_that_stays_guarded_is_reported(
    store: IncidentStore, kueue: bool, violated: bool
) -> None:
    """The soak never lifts a job's Kueue label: its refused incident left for "the fix can be
    applied now" means the agent misjudged the guard."""
    first = incident(store, "soak-0", "a", approver="U1", ends=IncidentStatus.REFUSED)
    assert store.transition(first, IncidentStatus.REFUSED, IncidentStatus.SUPERSEDED,
                            actor="zonemedic", now=T0 + timedelta(seconds=4),
                            detail={"reason": NOW_FIXABLE + ": what refused it no longer holds"}
                            ).applied  # fmt: skip
    incident(store, "soak-0", "a", approver=None, at=T0 + timedelta(seconds=5))
    report = run(store, jobs=[_job("a", kueue=kueue)])
    assert ("7 one incident" in report.violations) is violated, report.lines()
    assert report.violated == (1 if violated else 0), report.lines()
