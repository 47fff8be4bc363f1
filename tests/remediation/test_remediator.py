"""The Remediator on the twin over HTTP (official client, real SQLite store): the happy path, the
refusal that writes nothing, the rollback, a 409 on the suspend patch, a vanished job, an
incident recorded without its job's uid (bound to the job created before it, never to one of
the same name created after)."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from agent.errors import UnavailableError
from agent.model.incident import Actor, FindingRecord
from agent.model.lifecycle import (
    DecisionOutcome,
    DecisionSource,
    IncidentStatus,
    RemediationActionKind,
)
from agent.remediation.fence import open_fence
from agent.remediation.recheck import Scope
from agent.remediation.run import FailedError, RefusedError, Run, Step
from agent.remediation.template import TemplateState
from agent.store.repository import IncidentStore
from agent.twin.faults import RefusalKind, WriteRecord
from agent.twin.patch import PatchType
from agent.twin.resources import lookup
from tests.remediation.crashes import Killed
from tests.remediation.harness import (
    FAST,
    ZONE,
    Lab,
    Terms,
    approved_incident,
    cordon,
    recorded_plan,
    resumes,
    running_lab,
    served_job,
    settled_finding,
    split,
)
from tests.support.waiting import wait


def pods(lab: Lab) -> list[dict[str, Any]]:
    return lab.api.json("GET", "/api/v1/namespaces/ml/pods")["items"]  # type: ignore[no-any-return]


def patch_job(lab: Lab, patch: dict[str, Any]) -> None:
    client.CustomObjectsApi(lab.api.api_client).patch_namespaced_custom_object(
        "kubeflow.org", "v1", "ml", "pytorchjobs", "llm-finetune", patch)


def delete_job(lab: Lab, *, until_pods_gone: bool = True) -> None:
    """The job's owner deletes it (and, by default, the test waits until its pods are gone)."""
    client.CustomObjectsApi(lab.api.api_client).delete_namespaced_custom_object(
        "kubeflow.org", "v1", "ml", "pytorchjobs", "llm-finetune")
    deadline = time.monotonic() + 30
    while until_pods_gone and pods(lab) and time.monotonic() < deadline:
        time.sleep(0.05)


def test_blocked_job_is_co_located_in_one_restart_and_resolved(tmp_path: Path, store: IncidentStore) -> None:
    with running_lab(tmp_path, "seed-blocked") as lab:
        split(lab)
        incident_id = approved_incident(lab, store)
        seen: list[Step] = []
        status = lab.remediator(store, on_step=seen.append).run(incident_id)
        assert status is IncidentStatus.RESOLVED
        # the operator's status writes may answer the dry run or the patch with a 409: each one
        # re-plans (PLANNED again) before the one suspend; nothing else may repeat. The intent
        # (SUSPENDING) is recorded before each patch sent.
        planning = seen[:-7]
        assert seen[-7:] == [Step.DRY_RUN, Step.SUSPENDING, Step.SUSPENDED, Step.PODS_GONE,
                             Step.RESUMED, Step.BOUND, Step.VERIFIED]  # fmt: skip
        assert planning[0] is Step.PLANNED and planning[-1] is Step.PLANNED, seen
        assert set(planning) <= {Step.PLANNED, Step.DRY_RUN, Step.SUSPENDING}, seen
        assert planning.count(Step.PLANNED) <= 1 + FAST.max_conflict_retries, seen
        live = served_job(lab)
        assert live["spec"]["runPolicy"]["suspend"] is False
        assert recorded_plan(store, incident_id).targets[0].state_of(live) is TemplateState.PLANNED
        nodes = {n["metadata"]["name"]: n["metadata"]["labels"][ZONE]
                 for n in lab.api.json("GET", "/api/v1/nodes")["items"]}  # fmt: skip
        assert {nodes[p["spec"]["nodeName"]] for p in pods(lab)} == {"us-east-1a"}
        assert resumes(lab) == 1
        detail = store.get_incident(incident_id)
        assert [e.kind.value for e in detail.events][-3:] == ["verifying", "verified", "resolved"]
        # a second run finds nothing to do
        assert lab.remediator(store).run(incident_id) is IncidentStatus.RESOLVED
        assert resumes(lab) == 1


def test_the_agents_service_account_with_the_deploy_cluster_role_is_enough(
    tmp_path: Path, store: IncidentStore
) -> None:
    with running_lab(tmp_path, "seed-blocked", rbac=True) as lab:
        incident_id = approved_incident(lab, store)
        lab.reset_accounting()
        assert lab.remediator(store).run(incident_id) is IncidentStatus.RESOLVED
        # dry run, suspend + templates, resume (plus a retry when the operator's status write
        # races the optimistic lock)
        writes = lab.writes()
        assert set(writes) == {"patch pytorchjobs"} and writes["patch pytorchjobs"] >= 3
        assert resumes(lab) == 1
        assert served_job(lab)["spec"]["runPolicy"]["suspend"] is False


def test_target_zone_cordoned_before_approval_is_refused_and_writes_nothing(
    tmp_path: Path, store: IncidentStore
) -> None:
    with running_lab(tmp_path, "seed-degraded") as lab:
        split(lab)
        incident_id = approved_incident(lab, store)
        cordon(lab, "us-east-1a")
        lab.reset_accounting()
        status = lab.remediator(store).run(incident_id)
        assert status is IncidentStatus.REFUSED
        assert lab.writes() == {}
        detail = store.get_incident(incident_id)
        reason = detail.events[-1].detail["reason"]
        assert "no zone has 4 free GPUs for the job (free: us-east-1a: 0" in reason
        assert served_job(lab)["spec"]["runPolicy"]["suspend"] is False


def test_target_zone_cordoned_after_the_suspend_rolls_back_to_the_original_templates(
    tmp_path: Path, store: IncidentStore
) -> None:
    with running_lab(tmp_path, "seed-degraded") as lab:
        split(lab)
        incident_id = approved_incident(lab, store)
        original = served_job(lab)

        def on_step(step: Step) -> None:
            if step is Step.SUSPENDED:
                cordon(lab, "us-east-1a")

        settings = replace(FAST, schedule_timeout=timedelta(seconds=1.5))
        status = lab.remediator(store, settings=settings, on_step=on_step).run(incident_id)
        assert status is IncidentStatus.ROLLED_BACK
        live = served_job(lab)
        assert live["spec"]["runPolicy"]["suspend"] is False
        for rtype, spec in live["spec"]["pytorchReplicaSpecs"].items():
            assert spec["template"] == original["spec"]["pytorchReplicaSpecs"][rtype]["template"]
        detail = store.get_incident(incident_id)
        reason = detail.events[-1].detail["reason"]
        assert "unschedulable after 1.5s" in reason and "node(s) were unschedulable" in reason
        steps = [a.payload.get("step") for a in detail.actions if a.kind is RemediationActionKind.ROLLBACK]
        # the intent before the restore patch, its completion recorded before the resume
        assert steps == ["rollback_started", "restoring", "rollback_restored", "rolled_back"]


def test_a_conflicting_write_before_the_suspend_patch_is_re_planned_and_retried(
    tmp_path: Path, store: IncidentStore
) -> None:
    with running_lab(tmp_path, "seed-degraded") as lab:
        split(lab)
        incident_id = approved_incident(lab, store)
        touched: list[str] = []

        def on_step(step: Step) -> None:
            if step is Step.DRY_RUN and not touched:  # someone edits the job meanwhile
                patch_job(lab, {"metadata": {"annotations": {"owner": "bob"}}})
                touched.append("yes")

        status = lab.remediator(store, on_step=on_step).run(incident_id)
        assert status is IncidentStatus.RESOLVED
        detail = store.get_incident(incident_id)
        plans = [a for a in detail.actions if a.kind is RemediationActionKind.PLAN]
        assert len(plans) >= 2  # planned again after the 409
        applied = [a for a in detail.actions if a.payload.get("step") == "suspended"]
        assert applied[-1].payload["attempt"] == len(plans)
        assert served_job(lab)["metadata"]["annotations"]["owner"] == "bob"
        assert resumes(lab) == 1


def test_a_conflicting_dry_run_is_recorded_then_re_planned_and_retried(
    tmp_path: Path, store: IncidentStore
) -> None:
    """The job changes between its read and the dry run (the dry run answered 409 Conflict): the
    409 is in the timeline (a failed dry run saying so), and the next attempt, planned anew, goes
    through."""
    with running_lab(tmp_path, "seed-degraded") as lab:
        split(lab)
        incident_id = approved_incident(lab, store)
        api = lab.cluster.api
        assert api is not None
        api.faults.refuse(verb="patch", resource="pytorchjobs", kind=RefusalKind.CONFLICT,
                          count=1, dry_run=True)  # fmt: skip
        status = lab.remediator(store).run(incident_id)
        assert status is IncidentStatus.RESOLVED
        detail = store.get_incident(incident_id)
        dry_runs = [a for a in detail.actions if a.payload.get("step") == "dry_run"]
        assert [a.succeeded for a in dry_runs] == [False, True]
        assert "409" in (dry_runs[0].message or "")
        plans = [a for a in detail.actions if a.kind is RemediationActionKind.PLAN]
        assert len(plans) >= 2
        assert resumes(lab) == 1


def test_a_re_plan_after_a_conflict_refusing_before_the_first_write_is_refused_not_failed(
    tmp_path: Path, store: IncidentStore
) -> None:
    """The re-plan after a 409 finds no room (the target zone filled meanwhile): while the run
    has written nothing it is a refusal (the incident stays open, `refused`), never `failed` (a
    closed incident lets the next re-detection of the same split open another and post again);
    once a write may have been sent it is a failure (the job is resumed as it is)."""
    with running_lab(tmp_path, "seed-degraded") as lab:
        split(lab)
        incident_id = approved_incident(lab, store)
        cordon(lab, "us-east-1a")
        remediator = lab.remediator(store)
        fence = open_fence(remediator.leadership)
        assert fence is not None
        detail = store.get_incident(incident_id)
        assert detail.incident.job_ref is not None
        run = Run(incident_id, detail.incident.job_ref, IncidentStatus.REMEDIATING, detail, fence)
        with pytest.raises(RefusedError, match="no zone has 4 free GPUs"):
            remediator.recheck.plan(run, scope=Scope.CONFLICT)
        remediator.journal.record(run, RemediationActionKind.APPLY, Step.SUSPENDED, message="sent")
        run.detail = store.get_incident(incident_id)
        assert run.written()
        with pytest.raises(FailedError, match="no zone has 4 free GPUs") as failed:
            remediator.recheck.plan(run, scope=Scope.CONFLICT)
        assert type(failed.value) is FailedError


def test_a_job_deleted_after_the_approval_is_superseded(tmp_path: Path, store: IncidentStore) -> None:
    with running_lab(tmp_path, "seed-degraded") as lab:
        split(lab)
        incident_id = approved_incident(lab, store)
        delete_job(lab)
        lab.reset_accounting()
        assert lab.remediator(store).run(incident_id) is IncidentStatus.SUPERSEDED
        assert lab.writes() == {}


def test_a_job_deleted_after_the_plan_ends_superseded_with_nothing_written(
    tmp_path: Path, store: IncidentStore
) -> None:
    with running_lab(tmp_path, "seed-degraded") as lab:
        split(lab)
        incident_id = approved_incident(lab, store)
        lab.reset_accounting()

        def on_step(step: Step) -> None:
            if step is Step.PLANNED:  # the job goes between the plan and the first write
                delete_job(lab)

        assert lab.remediator(store, on_step=on_step).run(incident_id) is IncidentStatus.SUPERSEDED
        detail = store.get_incident(incident_id)
        kinds = [e.kind.value for e in detail.events]
        assert kinds[-3:] == ["remediation_started", "remediation_step", "superseded"]  # the plan
        assert detail.events[-1].detail["reason"] in (
            "the job was deleted or recreated since the plan", "the job has no live pods any more")
        assert lab.writes() == {"delete pytorchjobs": 1}  # the test's own delete, nothing else


def test_a_job_deleted_by_its_owner_after_the_resume_ends_superseded_nothing_to_restore(
    tmp_path: Path, store: IncidentStore
) -> None:
    with running_lab(tmp_path, "seed-degraded") as lab:
        split(lab)
        incident_id = approved_incident(lab, store)

        def on_step(step: Step) -> None:
            if step is Step.RESUMED:  # the owner deletes the job while its pods come back
                delete_job(lab, until_pods_gone=False)

        assert lab.remediator(store, on_step=on_step).run(incident_id) is IncidentStatus.SUPERSEDED
        detail = store.get_incident(incident_id)
        reason = detail.events[-1].detail["reason"]
        assert reason.endswith("; the job was deleted or recreated meanwhile: nothing to restore")
        assert [a.payload.get("step") for a in detail.actions][-1] == "rollback_started"


def test_a_kueue_managed_job_is_refused(tmp_path: Path, store: IncidentStore) -> None:
    with running_lab(tmp_path, "seed-degraded") as lab:
        split(lab)
        incident_id = approved_incident(lab, store)
        patch_job(lab, {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "gpu"}}})
        lab.reset_accounting()
        assert lab.remediator(store).run(incident_id) is IncidentStatus.REFUSED
        assert lab.writes() == {}
        assert "Kueue-managed (queue gpu)" in store.get_incident(incident_id).events[-1].detail["reason"]


def test_two_executors_racing_on_one_approval_restart_the_job_once(
    tmp_path: Path, store: IncidentStore
) -> None:
    with running_lab(tmp_path, "seed-blocked") as lab:
        incident_id = approved_incident(lab, store)
        results: list[IncidentStatus] = []
        threads = [
            threading.Thread(target=lambda: results.append(lab.remediator(store).run(incident_id)))
            for _ in range(2)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert IncidentStatus.RESOLVED in results and len(results) == 2
        assert set(results) <= {IncidentStatus.RESOLVED, IncidentStatus.REMEDIATING}
        detail = store.get_incident(incident_id)
        suspended = [a for a in detail.actions if a.payload.get("step") == "suspended"]
        assert len(suspended) == 1
        # one plan, plus one per 409 re-plan (the operator's status writes race the lock)
        plans = [a.kind for a in detail.actions].count(RemediationActionKind.PLAN)
        assert plans == suspended[0].payload["attempt"]
        assert [e.kind.value for e in detail.events].count("remediation_started") == 1
        assert resumes(lab) == 1


def test_an_api_outage_mid_remediation_leaves_it_resumable(tmp_path: Path, store: IncidentStore) -> None:
    with running_lab(tmp_path, "seed-blocked") as lab:
        incident_id = approved_incident(lab, store)
        assert lab.cluster.api is not None
        faults = lab.cluster.api.faults

        def on_step(step: Step) -> None:
            if step is Step.DRY_RUN:  # the suspend patch meets a 503
                faults.fail(1, code=503, verb="patch", resource="pytorchjobs")

        with pytest.raises(UnavailableError, match="HTTP 503"):
            lab.remediator(store, on_step=on_step).run(incident_id)
        assert store.get_incident(incident_id).incident.status is IncidentStatus.REMEDIATING
        assert lab.remediator(store).run(incident_id) is IncidentStatus.RESOLVED
        assert resumes(lab) == 1


def test_a_dry_run_refused_by_the_server_fails_with_its_message_and_writes_nothing(
    tmp_path: Path, store: IncidentStore
) -> None:
    with running_lab(tmp_path, "seed-blocked", rbac=True) as lab:
        incident_id = approved_incident(lab, store)
        roles = lookup("clusterroles", group="rbac.authorization.k8s.io")
        role = lab.cluster.store.get(roles, "zonemedic")
        rules = [
            {**r, "verbs": [v for v in r["verbs"] if v != "patch"]}
            if "kubeflow.org" in r.get("apiGroups", []) else r
            for r in role["rules"]
        ]
        lab.cluster.store.patch(roles, "zonemedic", {"rules": rules}, patch_type=PatchType.MERGE)
        lab.reset_accounting()
        assert lab.remediator(store).run(incident_id) is IncidentStatus.FAILED
        detail = store.get_incident(incident_id)
        reason = detail.events[-1].detail["reason"]
        assert reason.startswith("the server-side dry run refused the patch: ")
        assert 'cannot patch resource "pytorchjobs"' in reason
        dry = [a for a in detail.actions if a.kind is RemediationActionKind.DRY_RUN]
        assert dry[-1].succeeded is False
        assert served_job(lab)["spec"]["runPolicy"]["suspend"] is False
        assert ZONE not in (served_job(lab)["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
                           .get("nodeSelector") or {})  # fmt: skip


def test_a_lost_lease_stops_the_run_and_the_next_leader_resumes_it(
    tmp_path: Path, store: IncidentStore
) -> None:
    with running_lab(tmp_path, "seed-blocked") as lab:
        incident_id = approved_incident(lab, store)
        lease = Terms()

        def on_step(step: Step) -> None:
            if step is Step.SUSPENDED:
                lease.lose()

        first = lab.remediator(store, on_step=on_step, leadership=lease)
        assert first.run(incident_id) is IncidentStatus.REMEDIATING
        steps = [a.payload.get("step") for a in store.get_incident(incident_id).actions]
        assert steps[-1] == "suspended"  # nothing after the lease was lost
        assert served_job(lab)["spec"]["runPolicy"]["suspend"] is True
        lease.lead()
        assert lab.remediator(store, leadership=lease).run(incident_id) is IncidentStatus.RESOLVED
        assert served_job(lab)["spec"]["runPolicy"]["suspend"] is False
        assert resumes(lab) == 1


def test_an_old_leaders_late_write_refused_after_its_term_ended_ends_nothing(
    tmp_path: Path, store: IncidentStore
) -> None:
    """Replica A checks its fence and sends the suspend patch; the term ends while the patch is
    on its way (A paused, another replica leads), and admission then refuses it. A ends nothing
    (not `failed`: that is the leader's to decide, and the leader may be remediating it right
    now); the next leader resumes from the recorded intent and resolves (soak seed 2084175612:
    a paused leader's late write refused by a webhook)."""
    with running_lab(tmp_path, "seed-blocked") as lab:
        incident_id = approved_incident(lab, store)
        lease = Terms()
        api = lab.cluster.api
        assert api is not None

        def term_ends_then_refused(record: WriteRecord) -> None:
            lease.lose()
            api.faults.refuse(verb="patch", resource="pytorchjobs", name=record.name, count=1,
                              dry_run=False, message="webhook says no")  # fmt: skip

        api.faults.on_write(term_ends_then_refused, resource="pytorchjobs", verb="patch",
                            landed=False)  # fmt: skip
        assert lab.remediator(store, leadership=lease).run(incident_id) is IncidentStatus.REMEDIATING
        detail = store.get_incident(incident_id)
        assert detail.incident.status is IncidentStatus.REMEDIATING
        assert [a.payload.get("step") for a in detail.actions][-1] == "suspending"
        assert served_job(lab)["spec"]["runPolicy"]["suspend"] is False  # the refused patch wrote nothing
        lease.lead()
        assert lab.remediator(store, leadership=lease).run(incident_id) is IncidentStatus.RESOLVED
        assert resumes(lab) == 1


def test_a_kubeflow_job_queued_by_kueue_after_the_plan_is_refused_before_the_first_write(
    tmp_path: Path, store: IncidentStore
) -> None:
    """Planned, then the process died; meanwhile the job was handed to Kueue: the guards, checked
    again right before the first write from the live job, refuse it with nothing written."""
    with running_lab(tmp_path, "seed-degraded") as lab:
        split(lab)
        incident_id = approved_incident(lab, store)

        def die_after_the_plan(step: Step) -> None:
            if step is Step.PLANNED:
                raise Killed("after the plan")

        with pytest.raises(Killed):
            lab.remediator(store, on_step=die_after_the_plan).run(incident_id)
        patch_job(lab, {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "gpu"}}})
        lab.reset_accounting()
        assert lab.remediator(store).run(incident_id) is IncidentStatus.REFUSED
        assert lab.writes() == {}
        reason = store.get_incident(incident_id).events[-1].detail["reason"]
        assert "PyTorchJob llm-finetune is queued by Kueue (label kueue.x-k8s.io/queue-name=gpu)" in reason
        assert reason.endswith("(checked again before the first write)")


def approved_without_uid(lab: Lab, store: IncidentStore) -> int:
    """The job's split recorded as an incident without the job's uid (its object had not
    reached the agent's cache), approved from the CLI."""
    document = settled_finding(lab).to_dict()
    document["job"]["uid"] = None
    now = datetime.now(UTC)
    record = FindingRecord.from_finding(document, cluster="twin", detected_at=now, gpus=4)
    incident = store.record_finding(record).incident
    assert incident.uid is None
    assert store.record_decision(
        incident.id, DecisionOutcome.APPROVE, actor=Actor("alice", "alice", DecisionSource.CLI),
        now=now, expected=IncidentStatus.OPEN,
    ).applied  # fmt: skip
    return incident.id


def test_an_incident_without_the_jobs_uid_is_bound_to_the_job_created_before_it_and_remediated(
    tmp_path: Path, store: IncidentStore
) -> None:
    with running_lab(tmp_path, "seed-blocked") as lab:
        incident_id = approved_without_uid(lab, store)
        uid = served_job(lab)["metadata"]["uid"]
        assert lab.remediator(store).run(incident_id) is IncidentStatus.RESOLVED
        detail = store.get_incident(incident_id)
        assert detail.incident.uid == uid  # bound to the job it found
        assert any(e.detail.get("uid") == uid for e in detail.events)  # the timeline says so
        assert recorded_plan(store, incident_id).preconditions.uid == uid


def test_a_job_deleted_and_recreated_with_its_name_before_the_approval_is_never_remediated(
    tmp_path: Path, store: IncidentStore
) -> None:
    """The incident never knew its job's uid; the job is deleted and created again with the same
    name (split the same way) before the approval is acted on: the job now there was created
    after the incident's first evidence, so it is another job. Superseded, saying so, with
    nothing written to it, and the incident not bound to it."""
    with running_lab(tmp_path, "seed-blocked") as lab:
        incident_id = approved_without_uid(lab, store)
        opened = store.get_incident(incident_id).incident.opened_at
        manifest = served_job(lab)
        old_uid = manifest["metadata"]["uid"]
        manifest["metadata"] = {"name": "llm-finetune", "namespace": "ml"}
        manifest.pop("status", None)
        delete_job(lab)
        # the API server's creation times have whole seconds: recreate in a later second
        wait(lambda: datetime.now(UTC) >= opened.replace(microsecond=0) + timedelta(seconds=1),
             timeout=5, what="the second after the incident opened")
        client.CustomObjectsApi(lab.api.api_client).create_namespaced_custom_object(
            "kubeflow.org", "v1", "ml", "pytorchjobs", manifest)
        settled_finding(lab)  # the new job is split the same way
        new_uid = served_job(lab)["metadata"]["uid"]
        assert new_uid != old_uid
        lab.reset_accounting()
        assert lab.remediator(store).run(incident_id) is IncidentStatus.SUPERSEDED
        detail = store.get_incident(incident_id)
        reason = detail.events[-1].detail["reason"]
        assert f"PyTorchJob ml/llm-finetune (uid {new_uid}) was created at " in reason, reason
        assert "another job of that name" in reason, reason
        assert lab.writes() == {}  # nothing written: not even a dry run
        assert detail.incident.uid is None
        assert not served_job(lab)["spec"]["runPolicy"].get("suspend")
