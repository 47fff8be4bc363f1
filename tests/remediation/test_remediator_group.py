"""The seed lab (a generic group: coordinator Deployment in zone-b, GPU worker Job in zone-a,
zone policies denying the traffic) resolved by moving the coordinator alone: its Deployment's
template pinned to zone-a with the GPU toleration and its `zone` label corrected, a rollout; the
GPU workers keep running untouched. A worker Job outside the zone is recreated; rollback restores
the Deployment and the Job.

A destructive write is never half-done: every point of the group path (each write the server
answered before its step is recorded, each step recorded; the rollback's too) killed, or met by a
database that refuses the record (SQLite locked, PostgreSQL cut off), then resumed by a fresh
Remediator, ends remediated or restored with each write made once; a CREATE the server refuses
(a webhook, a quota) recreates the original; a CREATE it would refuse is caught by the dry run
before anything is deleted; a paused old leader's late DELETE cannot remove the new Job; a replica
whose term ended sends nothing; the guards (Kueue on every object written, protected namespaces,
the hourly cap) hold again right before the first write; a worker Job that gave up is recreated
and the incident is resolved only once the whole gang runs."""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from agent.model.lifecycle import IncidentStatus, RemediationActionKind
from agent.remediation.group_steps import RECREATED_ANNOTATION
from agent.remediation.plan import Plan, TargetAction
from agent.remediation.remediator import Remediator
from agent.remediation.run import Step
from agent.remediation.writer import ClusterWriter, Write, WriteVerb
from agent.settings import KubernetesSettings
from agent.sources.kubeapi import KubeApi, build_api_client
from agent.store.repository import IncidentStore, open_store
from agent.twin import kubeconfig
from agent.twin.faults import RefusalKind
from agent.twin.resources import lookup
from tests.remediation.crashes import Death, GateCut, Killed, SqliteLock, Walk
from tests.remediation.harness import (
    FAST,
    GROUPS,
    LAB,
    NS,
    OUTAGE_BUDGET,
    Lab,
    Terms,
    add_zone_b_workers,
    approved_incident,
    bound,
    cordon,
    lab_job,
    new_store,
    pods,
    quick,
    recorded_plan,
    recorded_steps,
    running_lab,
    settled_finding,
    zones,
)
from tests.support import postgres
from tests.support.tcpgate import TcpGate
from tests.support.waiting import wait

SLOW_BIND = replace(FAST, schedule_timeout=timedelta(seconds=1.5))


def gpu_utilization(lab: Lab) -> dict[str, float]:
    with urllib.request.urlopen(lab.cluster.metrics.url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {
        s.labels["pod"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "DCGM_FI_DEV_GPU_UTIL" and s.labels.get("namespace") == NS
    }


def deployment(lab: Lab) -> dict[str, Any]:
    found: dict[str, Any] = lab.api.json("GET", f"/apis/apps/v1/namespaces/{NS}/deployments/rendezvous")
    return found


def real_writes(lab: Lab, verb: str, resource: str, name: str) -> int:
    """Writes the twin served for `name` in the lab namespace (dry runs left out), from its write
    log (a create is logged on the collection: any name)."""
    assert lab.cluster.api is not None
    return sum(1 for w in lab.cluster.api.accounting.writes()
               if (w.verb, w.resource, w.namespace, w.dry_run) == (verb, resource, NS, False)
               and w.name == ("" if verb == "create" else name))  # fmt: skip


def reasons(store: IncidentStore, incident_id: int) -> list[dict[str, Any]]:
    return [dict(e.detail) for e in store.get_incident(incident_id).events]


def test_lab_is_resolved_by_moving_the_coordinator_alone(tmp_path: Path, store: IncidentStore) -> None:
    with running_lab(tmp_path, "lab", diagnosis=GROUPS) as lab:
        incident_id = approved_incident(lab, store, ref=LAB)
        workers_before = {p["metadata"]["uid"] for p in pods(lab) if p["metadata"]["labels"]["role"] == "worker"}
        assert len(workers_before) == 4
        job_uid = lab.api.json("GET", f"/apis/batch/v1/namespaces/{NS}/jobs/llm-workers")["metadata"]["uid"]
        seen: list[Step] = []
        status = lab.remediator(store, on_step=seen.append).run(incident_id)
        detail = store.get_incident(incident_id)
        assert status is IncidentStatus.RESOLVED, [dict(e.detail) for e in detail.events]
        assert Step.ROLLING_OUT in seen and Step.ROLLED_OUT in seen and Step.JOB_DELETED not in seen
        assert seen.index(Step.ROLLING_OUT) < seen.index(Step.ROLLED_OUT)  # the intent first
        plan = Plan.from_dict(next(a for a in detail.actions if a.kind is RemediationActionKind.PLAN).payload["plan"])
        assert [(t.action, t.name) for t in plan.targets] == [(TargetAction.ROLLOUT, "rendezvous")]
        assert plan.gang == 5
        assert set(zones(lab).values()) == {"zone-a"}
        coordinator = [p for p in pods(lab) if p["metadata"]["labels"]["role"] == "coordinator"]
        assert len(coordinator) == 1 and coordinator[0]["metadata"]["labels"]["zone"] == "zone-a"
        workers_after = {p["metadata"]["uid"] for p in pods(lab) if p["metadata"]["labels"]["role"] == "worker"}
        assert workers_after == workers_before  # untouched
        assert lab.api.json("GET", f"/apis/batch/v1/namespaces/{NS}/jobs/llm-workers")["metadata"]["uid"] == job_uid
        assert set(lab.writes()) == {"patch deployments"}  # the dry run and the patch
        assert lab.cluster.wait_until(
            lambda: (u := gpu_utilization(lab)) and min(u.values()) >= 80.0, timeout=20
        ), gpu_utilization(lab)


@pytest.mark.parametrize("rollback", [False, True])
def test_a_worker_job_outside_the_zone_is_recreated_and_rollback_restores_it(
    tmp_path: Path, store: IncidentStore, rollback: bool
) -> None:
    with running_lab(tmp_path, "lab", diagnosis=GROUPS) as lab:
        original = add_zone_b_workers(lab)
        incident_id = approved_incident(lab, store, ref=LAB)
        lab.reset_accounting()

        def on_step(step: Step) -> None:
            if rollback and step is Step.JOB_DELETED:  # zone-a takes no new pod from now on
                cordon(lab, "zone-a")

        status = lab.remediator(store, settings=SLOW_BIND, on_step=on_step).run(incident_id)
        detail = store.get_incident(incident_id)
        plan = Plan.from_dict(next(a for a in detail.actions if a.kind is RemediationActionKind.PLAN).payload["plan"])
        assert {(t.action, t.name) for t in plan.targets} == {
            (TargetAction.ROLLOUT, "rendezvous"), (TargetAction.RECREATE, "llm-workers-b")}
        found = lab_job(lab, "llm-workers-b")
        assert found is not None
        assert found["metadata"]["uid"] != original["metadata"]["uid"]  # recreated
        assert (found["spec"]["parallelism"], found["spec"]["completions"]) == (2, 2)
        assert found["metadata"]["labels"]["app"] == "llm-pretrain"
        template = found["spec"]["template"]
        if not rollback:
            assert status is IncidentStatus.RESOLVED, [dict(e.detail) for e in detail.events]
            assert template["metadata"]["labels"]["zone"] == "zone-a"
            assert template["spec"]["nodeSelector"]["topology.kubernetes.io/zone"] == "zone-a"
            assert set(zones(lab).values()) == {"zone-a"}
            assert found["metadata"]["annotations"][RECREATED_ANNOTATION] == f"incident/{incident_id}/planned"
        else:
            assert status is IncidentStatus.ROLLED_BACK, [dict(e.detail) for e in detail.events]
            assert template["metadata"]["labels"]["zone"] == "zone-b"
            assert template["spec"]["nodeSelector"] == original["spec"]["template"]["spec"]["nodeSelector"]
            assert found["metadata"]["annotations"][RECREATED_ANNOTATION] == f"incident/{incident_id}/original"
            restored = deployment(lab)["spec"]["template"]
            assert restored["metadata"]["labels"]["zone"] == "zone-b"
            assert "topology.kubernetes.io/zone" not in (restored["spec"].get("nodeSelector") or {})
        # every DELETE named the Job it was planned for (uid, resourceVersion): the write log
        # holds one DELETE forward (and one of the Job it created, on rollback)
        assert real_writes(lab, "delete", "jobs", "llm-workers-b") == (2 if rollback else 1)
        assert real_writes(lab, "create", "jobs", "llm-workers-b") == (2 if rollback else 1)


# ------------------------------------------------------------------------------------------------
# never half-done: every point killed, or the database away, then resumed


def _walk(lab: Lab, store: IncidentStore, incident_id: int, death: Death, *, outage: Any = None,
          on_step: Callable[[Step], None] = lambda _s: None, settings: Any = FAST,
          only: Callable[[str], bool] = lambda _w: True) -> Walk:  # fmt: skip
    def make(walk_step: Callable[[Step], None], walk_write: Callable[[Write], None]) -> Any:
        def both(step: Step) -> None:
            on_step(step)
            walk_step(step)

        return lab.remediator(store, settings=settings, on_step=both, on_write=walk_write)

    return Walk(make, store, incident_id, death, outage=outage, only=only)


def _writes_only(where: str) -> bool:
    """The points right after a write landed: where a refused record matters."""
    return not where.startswith("step ")


def _count(walk: Walk, verb: WriteVerb, kind: str, name: str) -> int:
    return sum(1 for w in walk.writes if (w.verb, w.kind, w.name) == (verb, kind, name))


@pytest.mark.parametrize("death", [Death.KILL, Death.STORE_AWAY])
def test_every_point_of_the_group_path_stopped_then_resumed_ends_remediated_each_write_once(
    tmp_path: Path, template: Path, death: Death
) -> None:
    store, _ = new_store(template, tmp_path, **OUTAGE_BUDGET)
    try:
        with running_lab(tmp_path, "lab", diagnosis=GROUPS) as lab:
            add_zone_b_workers(lab)
            incident_id = approved_incident(lab, store, ref=LAB)
            # killed at every step and right after every write landed (before its record); the
            # database away right after every write landed (its record refused)
            walk = _walk(lab, store, incident_id, death, outage=SqliteLock(str(tmp_path / "incidents.db")),
                         only=_writes_only if death is Death.STORE_AWAY else lambda _w: True)  # fmt: skip
            status = walk.run()
            assert status is IncidentStatus.RESOLVED, (walk.outcomes, reasons(store, incident_id)[-3:])
            writes = ["patch Deployment rendezvous", "delete Job llm-workers-b", "create Job llm-workers-b"]
            steps = ["step rolling_out patch rendezvous", "step rolled_out",
                     "step job_deleting delete llm-workers-b", "step job_deleted", "step job_created",
                     "step resumed", "step bound", "step verified"]  # fmt: skip
            for where in writes + (steps if death is Death.KILL else []):
                assert where in walk.stops, (where, walk.stops)
            if death is Death.STORE_AWAY:
                assert walk.stops == writes, walk.stops
                assert sum(o.startswith("store away") for o in walk.outcomes) == 3, walk.outcomes
            # each write made once, whatever the deaths
            assert _count(walk, WriteVerb.PATCH, "Deployment", "rendezvous") == 1
            assert _count(walk, WriteVerb.DELETE, "Job", "llm-workers-b") == 1
            assert _count(walk, WriteVerb.CREATE, "Job", "llm-workers-b") == 1
            found = lab_job(lab, "llm-workers-b")
            assert found is not None  # never left deleted
            assert found["spec"]["template"]["spec"]["nodeSelector"]["topology.kubernetes.io/zone"] == "zone-a"
            assert set(zones(lab).values()) == {"zone-a"} and sum(bound(lab).values()) == 7
            steps = recorded_steps(store, incident_id)
            assert steps.count("job_deleted") == 1 and steps.count("job_created") == 1
    finally:
        store.close()


@pytest.mark.parametrize("death", [Death.KILL, Death.STORE_AWAY])
def test_every_point_of_the_group_rollback_stopped_then_resumed_ends_restored(
    tmp_path: Path, template: Path, death: Death
) -> None:
    store, _ = new_store(template, tmp_path, **OUTAGE_BUDGET)
    try:
        with running_lab(tmp_path, "lab", diagnosis=GROUPS) as lab:
            original = add_zone_b_workers(lab)
            incident_id = approved_incident(lab, store, ref=LAB)
            cordoned: list[bool] = []

            def on_step(step: Step) -> None:
                if step is Step.JOB_DELETED and not cordoned:  # the new pods will not fit
                    cordon(lab, "zone-a")
                    cordoned.append(True)

            walk = _walk(lab, store, incident_id, death, on_step=on_step, settings=SLOW_BIND,
                         outage=SqliteLock(str(tmp_path / "incidents.db")),
                         only=_writes_only if death is Death.STORE_AWAY else lambda _w: True)  # fmt: skip
            status = walk.run()
            assert status is IncidentStatus.ROLLED_BACK, (walk.outcomes, reasons(store, incident_id)[-3:])
            # the rollback's writes (with the store away, its CREATE lands in the run stopped at
            # its DELETE: the rollback records nothing between the two)
            writes = ["delete Job llm-workers-b #2", "patch Deployment rendezvous #2"]
            steps = ["create Job llm-workers-b #2", "step rollback_started",
                     "step restoring delete llm-workers-b", "step restoring patch rendezvous",
                     "step rolled_back"]  # fmt: skip
            for where in writes + (steps if death is Death.KILL else []):
                assert where in walk.stops, (where, walk.stops)
            assert _count(walk, WriteVerb.PATCH, "Deployment", "rendezvous") == 2  # forward, restore
            assert _count(walk, WriteVerb.DELETE, "Job", "llm-workers-b") == 2  # original, ours
            assert _count(walk, WriteVerb.CREATE, "Job", "llm-workers-b") == 2  # ours, original
            found = lab_job(lab, "llm-workers-b")
            assert found is not None
            assert found["spec"]["template"]["spec"]["nodeSelector"] == original["spec"]["template"]["spec"]["nodeSelector"]
            assert found["metadata"]["annotations"][RECREATED_ANNOTATION] == f"incident/{incident_id}/original"
            assert deployment(lab)["spec"]["template"]["metadata"]["labels"]["zone"] == "zone-b"
            # each target recorded restored once (the Job, then the Deployment), never again
            assert recorded_steps(store, incident_id).count("rollback_restored") == 2
    finally:
        store.close()


@pytest.mark.postgres
def test_postgresql_cut_off_right_after_the_delete_landed_then_resumed_recreates_the_job(
    tmp_path: Path,
) -> None:
    """The record of the DELETE meets PostgreSQL restarting (every connection cut, new ones
    refused): no crash, the run stops; once it is back, a fresh run creates the Job from the
    plan instead of reading the deletion as "healthy since the plan"."""
    from agent.settings import DatabaseSettings
    from agent.store.engine import make_engine
    from agent.store.migrate import upgrade

    with postgres.throwaway_database() as direct_url:
        engine = make_engine(direct_url)
        upgrade(engine, DatabaseSettings())
        engine.dispose()
        gate = TcpGate(postgres.HOST, postgres.PORT)
        dbname = direct_url.rsplit("/", 1)[1]
        settings = DatabaseSettings(write_retry=timedelta(milliseconds=500))
        store = open_store(settings, url=postgres.url_for(dbname, host="127.0.0.1", port=gate.port))
        try:
            with running_lab(tmp_path, "lab", diagnosis=GROUPS) as lab:
                add_zone_b_workers(lab)
                incident_id = approved_incident(lab, store, ref=LAB)
                walk = _walk(lab, store, incident_id, Death.STORE_AWAY, outage=GateCut(gate),
                             only=lambda where: where == "delete Job llm-workers-b")  # fmt: skip
                assert walk.run() is IncidentStatus.RESOLVED, walk.outcomes
                assert walk.stops == ["delete Job llm-workers-b"]
                assert any(o.startswith("store away") for o in walk.outcomes), walk.outcomes
                assert _count(walk, WriteVerb.DELETE, "Job", "llm-workers-b") == 1
                assert _count(walk, WriteVerb.CREATE, "Job", "llm-workers-b") == 1
                assert lab_job(lab, "llm-workers-b") is not None
        finally:
            store.close()
            gate.close()


# ------------------------------------------------------------------------------------------------
# refused writes


@pytest.mark.parametrize("kind", [RefusalKind.WEBHOOK, RefusalKind.QUOTA])
def test_a_create_refused_after_the_delete_recreates_the_original_and_ends_rolled_back(
    tmp_path: Path, store: IncidentStore, kind: RefusalKind
) -> None:
    with running_lab(tmp_path, "lab", diagnosis=GROUPS) as lab:
        original = add_zone_b_workers(lab)
        incident_id = approved_incident(lab, store, ref=LAB)
        assert lab.cluster.api is not None
        # admission lets the dry runs through and refuses the first real CREATE (a quota used up
        # meanwhile, a webhook with side effects that is not called on dry runs)
        lab.cluster.api.faults.refuse(verb="create", resource="jobs", kind=kind, name="llm-workers-b",
                                      dry_run=False, count=1, message="jobs must name a cost center")  # fmt: skip
        status = lab.remediator(store).run(incident_id)
        detail = store.get_incident(incident_id)
        reason = detail.events[-1].detail["reason"]
        assert status is IncidentStatus.ROLLED_BACK, reason
        expected = ('admission webhook "deny.twin.zonemedic.io" denied the request: jobs must name a cost center'
                    if kind is RefusalKind.WEBHOOK else
                    'jobs.batch "llm-workers-b" is forbidden: exceeded quota: object-counts, requested: count/jobs.batch=1')  # fmt: skip
        assert reason.startswith("creating Job ml-lab/llm-workers-b was refused: "), reason
        assert expected in reason, reason
        found = lab_job(lab, "llm-workers-b")
        assert found is not None  # the original is back
        assert found["spec"]["template"] == original["spec"]["template"] | {
            "metadata": found["spec"]["template"]["metadata"]}
        assert found["spec"]["template"]["metadata"]["labels"]["zone"] == "zone-b"
        assert found["metadata"]["annotations"][RECREATED_ANNOTATION] == f"incident/{incident_id}/original"
        assert deployment(lab)["spec"]["template"]["metadata"]["labels"]["zone"] == "zone-b"
        assert lab.cluster.wait_until(lambda: bound(lab).get("zone-b") == 3, timeout=30), bound(lab)


def test_a_create_the_server_would_refuse_fails_at_the_dry_run_before_anything_is_deleted(
    tmp_path: Path, store: IncidentStore
) -> None:
    with running_lab(tmp_path, "lab", diagnosis=GROUPS) as lab:
        original = add_zone_b_workers(lab)
        incident_id = approved_incident(lab, store, ref=LAB)
        assert lab.cluster.api is not None
        lab.cluster.api.faults.refuse(verb="create", resource="jobs", name="llm-workers-b",
                                      message="no new Jobs in ml-lab this week")  # fmt: skip
        lab.reset_accounting()
        assert lab.remediator(store).run(incident_id) is IncidentStatus.FAILED
        detail = store.get_incident(incident_id)
        reason = detail.events[-1].detail["reason"]
        assert reason == ('the server-side dry run refused a change: admission webhook '
                          '"deny.twin.zonemedic.io" denied the request: no new Jobs in ml-lab this week')
        dry = [a for a in detail.actions if a.kind is RemediationActionKind.DRY_RUN]
        assert dry[-1].succeeded is False
        assert not [w for w in lab.cluster.api.accounting.writes() if not w.dry_run]  # nothing written
        found = lab_job(lab, "llm-workers-b")
        assert found is not None and found["metadata"]["uid"] == original["metadata"]["uid"]


# ------------------------------------------------------------------------------------------------
# fencing: a paused old leader, a term that ended


def test_a_paused_old_leaders_late_delete_cannot_remove_the_new_job(
    tmp_path: Path, store: IncidentStore
) -> None:
    """Replica A checks its fence and sends the DELETE, which stays in flight (A paused); replica
    B takes over, recreates the Job from the plan and resolves. A's DELETE then arrives: its
    preconditions name the Job planned (uid and resourceVersion), so the server answers 409 and
    the new Job stays."""
    with running_lab(tmp_path, "lab", diagnosis=GROUPS) as lab:
        add_zone_b_workers(lab)
        incident_id = approved_incident(lab, store, ref=LAB)
        assert lab.cluster.api is not None
        host, port = lab.cluster.api.url.removeprefix("http://").rsplit(":", 1)
        gate = TcpGate(host, int(port))
        api_a = KubeApi(build_api_client(KubernetesSettings(
            kubeconfig=str(kubeconfig.write(tmp_path / "kubeconfig-a", f"http://127.0.0.1:{gate.port}")))))  # fmt: skip
        lease_a = Terms()
        outcome: list[Any] = []

        def a_on_step(step: Step) -> None:
            if step is Step.JOB_DELETING:  # the intent is recorded; the DELETE goes next
                gate.hold()

        remediator_a = Remediator(api_a, store, diagnose=lab.diagnose, settings=FAST,
                                  on_step=a_on_step, leadership=lease_a,
                                  writer=ClusterWriter(api_a.api_client, timeout=120.0))  # fmt: skip  # A waits for its answer

        def run_a() -> None:
            try:
                outcome.append(remediator_a.run(incident_id))
            except Exception as exc:  # the test reads what A ended with
                outcome.append(exc)

        thread = threading.Thread(target=run_a)
        try:
            thread.start()
            wait(lambda: gate.held_bytes() > 0, timeout=30, what="A's DELETE held in flight")
            planned_uid = recorded_plan(store, incident_id).targets[-1].uid
            assert lab_job(lab, "llm-workers-b")["metadata"]["uid"] == planned_uid  # type: ignore[index]
            # A is paused with its DELETE in flight; its lease expires; B leads and finishes
            lease_a.lose()
            assert lab.remediator(store).run(incident_id) is IncidentStatus.RESOLVED
            new = lab_job(lab, "llm-workers-b")
            assert new is not None and new["metadata"]["uid"] != planned_uid
            gate.release()  # A wakes up: its DELETE reaches the server
            thread.join(timeout=30)
            assert not thread.is_alive()
        finally:
            gate.release()
            thread.join(timeout=30)
            gate.close()
            api_a.api_client.close()
        after = lab_job(lab, "llm-workers-b")
        assert after is not None and after["metadata"]["uid"] == new["metadata"]["uid"]  # still B's
        assert not after["metadata"].get("deletionTimestamp")
        assert outcome and outcome[0] is IncidentStatus.REMEDIATING, outcome  # A stopped, wrote nothing more
        assert store.get_incident(incident_id).incident.status is IncidentStatus.RESOLVED


def test_a_replica_whose_term_ended_sends_no_write_and_the_next_term_resumes(
    tmp_path: Path, store: IncidentStore
) -> None:
    with running_lab(tmp_path, "lab", diagnosis=GROUPS) as lab:
        add_zone_b_workers(lab)
        incident_id = approved_incident(lab, store, ref=LAB)
        lease = Terms()
        sent: list[Write] = []

        def on_step(step: Step) -> None:
            if step is Step.JOB_DELETING:
                lease.lose()  # the lease is lost between the intent and the DELETE
                lease.lead()  # ... and won again: a new term, not this run's

        first = lab.remediator(store, on_step=on_step, on_write=sent.append, leadership=lease)
        assert first.run(incident_id) is IncidentStatus.REMEDIATING
        assert not [w for w in sent if w.verb is WriteVerb.DELETE and not w.dry_run]
        assert lab_job(lab, "llm-workers-b")["metadata"]["uid"] == recorded_plan(store, incident_id).targets[-1].uid  # type: ignore[index]
        assert recorded_steps(store, incident_id)[-1] == "job_deleting"
        assert lab.remediator(store, leadership=lease).run(incident_id) is IncidentStatus.RESOLVED


# ------------------------------------------------------------------------------------------------
# guards for every kind, again before the first write


def _kueue_label_on_the_deployment(lab: Lab) -> None:
    client.AppsV1Api(lab.api.api_client).patch_namespaced_deployment(
        "rendezvous", NS, {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "gpu"}}})


def test_a_kueue_managed_deployment_of_a_group_is_refused_with_nothing_written(
    tmp_path: Path, store: IncidentStore
) -> None:
    with running_lab(tmp_path, "lab", diagnosis=GROUPS) as lab:
        incident_id = approved_incident(lab, store, ref=LAB)
        _kueue_label_on_the_deployment(lab)
        lab.reset_accounting()
        assert lab.remediator(store).run(incident_id) is IncidentStatus.REFUSED
        reason = store.get_incident(incident_id).events[-1].detail["reason"]
        assert "Deployment rendezvous is queued by Kueue (label kueue.x-k8s.io/queue-name=gpu)" in reason
        assert lab.writes() == {}


@pytest.mark.parametrize("change", ["protected", "kueue", "cap"])
def test_guards_are_checked_again_right_before_the_first_write(
    tmp_path: Path, store: IncidentStore, change: str
) -> None:
    """Planned under one configuration, resumed (after a crash) under the settings now in force
    and with the live objects as they are now: a guard that no longer clears stops it before
    anything is written."""
    with running_lab(tmp_path, "lab", diagnosis=GROUPS) as lab:
        incident_id = approved_incident(lab, store, ref=LAB)

        def die_after_the_plan(step: Step) -> None:
            if step is Step.PLANNED:
                raise Killed("after the plan")

        with pytest.raises(Killed):
            lab.remediator(store, on_step=die_after_the_plan).run(incident_id)
        kw: dict[str, Any] = {}
        if change == "protected":
            kw["protected_namespaces"] = ["kube-system", NS]
        elif change == "kueue":
            _kueue_label_on_the_deployment(lab)
        else:
            kw["settings"] = replace(FAST, max_per_hour=0)
        lab.reset_accounting()
        status = lab.remediator(store, **kw).run(incident_id)
        assert lab.writes() == {}
        detail = store.get_incident(incident_id)
        if change == "cap":
            assert status is IncidentStatus.REMEDIATING
            assert detail.events[-1].detail["waiting"].startswith("0 remediation(s) started in the last hour; the cap is 0")
            assert lab.remediator(store).run(incident_id) is IncidentStatus.RESOLVED  # once it clears
            return
        assert status is IncidentStatus.REFUSED
        reason = detail.events[-1].detail["reason"]
        assert reason.endswith("(checked again before the first write)"), reason
        assert ("protected namespace ml-lab" if change == "protected" else "queued by Kueue") in reason


# ------------------------------------------------------------------------------------------------
# workers that gave up


def test_a_worker_job_that_gave_up_is_recreated_and_resolved_only_once_the_whole_gang_runs(
    tmp_path: Path, store: IncidentStore
) -> None:
    """The second worker Job's pods give up while blocked (3 quick tries, restartPolicy Never,
    backoffLimit 0) and the Job fails. The fix moves the coordinator AND recreates that Job:
    resolved only with all seven pods running in zone-a."""
    with running_lab(tmp_path, "lab", diagnosis=GROUPS) as lab:
        add_zone_b_workers(
            lab, annotations={"twin.zonemedic.io/connect-attempts": "3",
                              "twin.zonemedic.io/connect-retry-seconds": "0.2"},
            restart_policy="Never", backoff_limit=0, settle=False,
        )  # fmt: skip

        def failed() -> bool:
            found = lab_job(lab, "llm-workers-b")
            return found is not None and any(
                c["type"] == "Failed" and c["status"] == "True"
                for c in (found.get("status") or {}).get("conditions") or [])

        wait(failed, timeout=30, what="llm-workers-b failed (its workers gave up)")
        gave_up = lab_job(lab, "llm-workers-b")
        assert gave_up is not None
        incident_id = approved_incident(lab, store, ref=LAB)
        status = lab.remediator(store).run(incident_id)
        assert status is IncidentStatus.RESOLVED, reasons(store, incident_id)[-3:]
        plan = recorded_plan(store, incident_id)
        assert {(t.action, t.name) for t in plan.targets} == {
            (TargetAction.ROLLOUT, "rendezvous"), (TargetAction.RECREATE, "llm-workers-b")}
        assert plan.gang == 7
        found = lab_job(lab, "llm-workers-b")
        assert found is not None and found["metadata"]["uid"] != gave_up["metadata"]["uid"]
        running = [p for p in pods(lab) if p["status"].get("phase") == "Running"]
        assert len(running) == 7 and set(zones(lab).values()) == {"zone-a"}
        verified = [a for a in store.get_incident(incident_id).actions if a.payload.get("step") == "verified"]
        assert verified[-1].succeeded is True


def test_the_gang_not_running_is_never_resolved(tmp_path: Path, store: IncidentStore) -> None:
    """Every pod bound in the target zone and every flow allowed, but the moved coordinator
    crashes once the pods are bound and waits in CrashLoopBackOff (a minute's back-off): the gang
    is not running, so verification fails and rolls back instead of resolving."""
    scenario = quick("lab")
    scenario = replace(scenario, model=replace(scenario.model, crash_backoff_seconds=60.0,
                                               crash_backoff_max_seconds=60.0))  # fmt: skip
    with running_lab(tmp_path, scenario, diagnosis=GROUPS) as lab:
        incident_id = approved_incident(lab, store, ref=LAB)
        crashed: list[str] = []

        def on_step(step: Step) -> None:
            if step is Step.BOUND:
                (coordinator,) = [p["metadata"]["name"] for p in pods(lab)
                                  if p["metadata"]["labels"]["role"] == "coordinator"]  # fmt: skip

                def crashed_once() -> bool:
                    lab.cluster.kubelet.crash(NS, coordinator, message="CUDA error")  # once running
                    pod = lab.api.json("GET", f"/api/v1/namespaces/{NS}/pods/{coordinator}")
                    return any("waiting" in (c.get("state") or {})
                               for c in pod["status"].get("containerStatuses") or [])  # fmt: skip

                wait(crashed_once, timeout=10, what="the coordinator crashed")
                crashed.append(coordinator)

        settings = replace(FAST, verify_window=timedelta(seconds=3))
        status = lab.remediator(store, settings=settings, on_step=on_step).run(incident_id)
        reason = store.get_incident(incident_id).events[-1].detail["reason"]
        assert status is IncidentStatus.ROLLED_BACK, reason
        assert "the gang is not running after 3s: 4 of 5 pod(s) running: " in reason, reason
        assert f"{crashed[0]} (CrashLoopBackOff)" in reason, reason


def test_a_template_changed_by_its_owner_before_the_first_write_is_superseded_with_nothing_written(
    tmp_path: Path, store: IncidentStore
) -> None:
    """The Deployment's owner pins it elsewhere after the plan: the incident no longer applies;
    nothing of zonemedic's lands on it (not a rollback of writes never made)."""
    with running_lab(tmp_path, "lab", diagnosis=GROUPS) as lab:
        incident_id = approved_incident(lab, store, ref=LAB)

        def die_after_the_plan(step: Step) -> None:
            if step is Step.PLANNED:
                raise Killed("after the plan")

        with pytest.raises(Killed):
            lab.remediator(store, on_step=die_after_the_plan).run(incident_id)
        client.AppsV1Api(lab.api.api_client).patch_namespaced_deployment("rendezvous", NS, {
            "spec": {"template": {"metadata": {"labels": {"zone": "zone-c"}}}}})  # fmt: skip
        lab.reset_accounting()
        assert lab.remediator(store).run(incident_id) is IncidentStatus.SUPERSEDED
        assert lab.writes() == {}
        steps = recorded_steps(store, incident_id)
        assert not {"rolling_out", "rollback_started"} & set(steps), steps


def test_the_lab_label_put_back_by_a_sync_is_a_mislabel_and_relabelling_resolves_it(
    tmp_path: Path, store: IncidentStore
) -> None:
    """After the fix, a GitOps sync (or a re-run of `kubectl apply`) puts the template's
    `zone: zone-b` back: the coordinator stays in zone-a (pinned) with a lying label. The job is
    diagnosed `zone_label_mismatch` (not `policy_blocked`) and the approved fix relabels it."""
    from agent.model.verdict import Verdict

    with running_lab(tmp_path, "lab", diagnosis=GROUPS) as lab:
        first = approved_incident(lab, store, ref=LAB)
        assert lab.remediator(store).run(first) is IncidentStatus.RESOLVED
        apps = client.AppsV1Api(lab.api.api_client)
        apps.patch_namespaced_deployment(
            "rendezvous", NS, {"spec": {"template": {"metadata": {"labels": {"zone": "zone-b"}}}}}
        )

        def lying() -> bool:
            coordinators = [p for p in pods(lab) if p["metadata"]["labels"]["role"] == "coordinator"]
            return (len(coordinators) == 1 and coordinators[0]["spec"].get("nodeName") is not None
                    and coordinators[0]["metadata"]["labels"]["zone"] == "zone-b"
                    and set(zones(lab).values()) == {"zone-a"})  # fmt: skip

        assert lab.cluster.wait_until(lying, timeout=60), zones(lab)
        finding = settled_finding(lab, LAB)  # the new pod's zone label is stamped after it binds
        assert finding is not None and finding.verdict is Verdict.ZONE_LABEL_MISMATCH, finding
        assert (finding.remediable, finding.target_zone) == (True, "zone-a")
        second = approved_incident(lab, store, ref=LAB)
        status = lab.remediator(store).run(second)
        detail = store.get_incident(second)
        assert detail.incident.verdict is Verdict.ZONE_LABEL_MISMATCH
        assert status is IncidentStatus.RESOLVED, [dict(e.detail) for e in detail.events]
        coordinator = [p for p in pods(lab) if p["metadata"]["labels"]["role"] == "coordinator"]
        assert [p["metadata"]["labels"]["zone"] for p in coordinator] == ["zone-a"]
        assert set(zones(lab).values()) == {"zone-a"}


def test_a_group_its_owner_deletes_after_the_recreate_is_not_resurrected_and_ends_superseded(
    tmp_path: Path, store: IncidentStore
) -> None:
    """The owner deletes the whole group (its Deployment and worker Jobs) right after zonemedic
    created the worker Job from the plan: the gang never comes, the run rolls back, and the
    rollback recreates nothing its owner deleted; nothing was restored, so the incident ends
    superseded, saying the group's workloads were deleted."""
    with running_lab(tmp_path, "lab", diagnosis=GROUPS) as lab:
        add_zone_b_workers(lab)
        incident_id = approved_incident(lab, store, ref=LAB)
        lab.reset_accounting()

        def on_step(step: Step) -> None:
            if step is Step.JOB_CREATED:
                for resource, name in (("deployments", "rendezvous"), ("jobs", "llm-workers"),
                                       ("jobs", "llm-workers-b")):
                    lab.cluster.store.delete(lookup(resource, group="apps" if resource == "deployments" else "batch"),
                                             name, namespace=NS)  # fmt: skip

        status = lab.remediator(store, settings=SLOW_BIND, on_step=on_step).run(incident_id)
        reason = store.get_incident(incident_id).events[-1].detail["reason"]
        assert status is IncidentStatus.SUPERSEDED, reason
        assert "the group's workloads were deleted by their owner meanwhile" in reason, reason
        assert lab_job(lab, "llm-workers-b") is None  # not recreated behind its owner's back
        assert real_writes(lab, "create", "jobs", "llm-workers-b") == 1  # the planned one only
