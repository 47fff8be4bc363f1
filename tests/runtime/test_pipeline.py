"""The detection pipeline on the real core and the real store (SQLite), fed through the cache.

A PyTorchJob split across zones with a zone-boundary policy is recorded once (however many
batches), fires the zone-split playbook into the outbox, resolves when the job is co-located,
is superseded when the job is gone; alerts and utilization drops open their own incidents; a
sweep reconciles and enqueues the digest. A batch diagnoses only the jobs it affects; a follower
records nothing; a cluster-wide batch (as on acquiring the lease) records and reconciles.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agent.model.incident import IncidentQuery, Verdict
from agent.model.job import JobRef
from agent.model.lifecycle import EventKind, MessageKind
from agent.model.waste import EgressBasis
from agent.model.workload import JobKind
from agent.runtime.evidence import steady_reading
from agent.runtime.root import build_pipeline
from agent.runtime.unrecorded import MissedReason
from agent.runtime.waste import egress_moved
from agent.sources.alertmanager import Alert, AlertStatus
from agent.sources.change import Change
from agent.sources.drop import DropVerdict
from agent.sources.packetdrops import PacketDrop
from agent.sources.prometheus import JobMetrics, MetricsReport
from tests.runtime.world import JOB, JOB_OBJECT, NOW, POLICY, R, World, gpt_pod, split_pods
from tests.support.prometheus import requires_prometheus, running_prometheus


def test_split_is_recorded_once_fires_playbooks_and_resolves_when_co_located(world: World) -> None:
    world.pipeline.handle_change(Change(jobs=frozenset({JOB})), 0.0)
    world.pipeline.handle_change(Change(namespaces=frozenset({"train"})), 0.0)  # a second batch
    (incident,) = world.incidents()
    # the zone-split playbook proposes co-location: the incident awaits approval for its 4h expiry
    assert (incident.verdict.value, incident.status.value, incident.uid) == (
        "zone_split_blocked", "awaiting_approval", "job-uid-1")
    assert incident.approval_deadline == NOW + timedelta(hours=4)
    gauge = world.parts.metrics.registry.get_sample_value
    assert gauge("zonemedic_incidents", {"verdict": "zone_split_blocked",
                                         "status": "awaiting_approval"}) == 1.0
    assert incident.target_zone == "zone-a"
    detail = world.store.get_incident(incident.id)
    assert detail.diagnosis["metrics"]["status"].startswith("metrics not configured")
    posts = {m.payload["action"]: m for m in detail.messages if m.kind is MessageKind.POST}
    assert set(posts) == {"notify", "propose_colocation"}
    assert posts["notify"].channel == "#ml-infra"
    assert posts["propose_colocation"].payload["approval"] == {
        "approvers": [], "expiry_seconds": 14400.0, "auto": False,
        "deadline": (NOW + timedelta(hours=4)).isoformat()}
    assert [e.kind.value for e in detail.events] == ["detected", "awaiting_approval", "redetected"]
    # co-locate the master in zone-a: the job is healthy, its incident resolved
    moved = [gpt_pod("gpt-small-master-0", "master", "gpu-a1", "zone-a"), *split_pods()[1:]]
    change = world.load("pods", moved)
    world.pipeline.handle_change(change, 0.0)
    (after,) = world.incidents()
    assert after.status.value == "resolved"
    assert world.incidents(open_only=True) == []
    registry = world.parts.metrics.registry
    assert registry.get_sample_value("zonemedic_incidents", {"verdict": "zone_split_blocked", "status": "awaiting_approval"}) is None


def test_gone_job_supersedes_and_a_new_incident_opens_after_it_closed(world: World) -> None:
    world.pipeline.handle_change(Change(everything=True), 0.0)
    world.load("pytorchjobs.v1.kubeflow.org", [])  # the job deleted, then its pods
    change = world.load("pods", [])
    world.pipeline.handle_change(change, 0.0)
    (gone,) = world.incidents()
    assert gone.status.value == "superseded"
    # back, split again: a new incident (the old one is closed)
    world.load("pytorchjobs.v1.kubeflow.org", [JOB_OBJECT])
    world.pipeline.handle_change(world.load("pods", split_pods()), 0.0)
    assert [i.status.value for i in world.incidents()] == ["awaiting_approval", "superseded"]


DENY_ALL = {
    "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
    "metadata": {"name": "deny-all", "namespace": "train"},
    "spec": {"podSelector": {"matchLabels": {"training.kubeflow.org/job-name": "gpt-small"}},
             "policyTypes": ["Ingress"]},
}


def test_a_job_whose_verdict_changes_class_keeps_its_one_incident(world: World) -> None:
    """A split that becomes a policy block (co-located by hand under a policy that denies the
    job's traffic in any zone) and a split again: one incident throughout, its verdict following
    the diagnosis, the new class's playbook fired on it (its one message updated, never a second
    post of another incident)."""
    world.pipeline.handle_change(Change(everything=True), 0.0)
    (incident,) = world.incidents()
    assert incident.verdict is Verdict.ZONE_SPLIT_BLOCKED
    world.load("networkpolicies.v1.networking.k8s.io", [DENY_ALL])
    moved = [gpt_pod("gpt-small-master-0", "master", "gpu-a1", "zone-a"), *split_pods()[1:]]
    world.pipeline.handle_change(world.load("pods", moved), 0.0)
    (blocked,) = world.incidents()
    assert (blocked.id, blocked.verdict) == (incident.id, Verdict.POLICY_BLOCKED)
    world.load("networkpolicies.v1.networking.k8s.io", [])
    world.pipeline.handle_change(world.load("pods", split_pods()), 0.0)
    (again,) = world.incidents()
    assert (again.id, again.verdict, again.status.value) == (
        incident.id, Verdict.ZONE_SPLIT_BLOCKED, "awaiting_approval")
    detail = world.store.get_incident(incident.id)
    seen = [e.detail["verdict"] for e in detail.events if e.kind is EventKind.REDETECTED]
    assert seen[-2:] == ["policy_blocked", "zone_split_blocked"]
    posts = sorted(f"{m.payload['playbook']}:{m.payload['action']}"
                   for m in detail.messages if m.kind is MessageKind.POST)
    assert posts == ["policy-blocked:notify", "zone-split:notify", "zone-split:propose_colocation"]
    assert {m.incident_id for m in detail.messages} == {incident.id}


def test_a_suspended_job_keeps_its_incident_and_its_resumed_split_folds_into_it(
    world: World,
) -> None:
    """Suspended by hand (its pods gone, the job object suspended) and resumed split again: the
    same incident, still awaiting its decision (its object, not finished, is still there while it
    has no pods); the job deleted is gone."""
    world.pipeline.handle_change(Change(everything=True), 0.0)
    (incident,) = world.incidents()
    suspended = {**JOB_OBJECT, "spec": {**JOB_OBJECT["spec"], "runPolicy": {"suspend": True}}}
    world.pipeline.handle_change(world.load("pytorchjobs.v1.kubeflow.org", [suspended]), 0.0)
    world.pipeline.handle_change(world.load("pods", []), 0.0)
    (still,) = world.incidents()
    assert (still.id, still.status.value) == (incident.id, "awaiting_approval")
    world.pipeline.handle_change(world.load("pytorchjobs.v1.kubeflow.org", [JOB_OBJECT]), 0.0)
    world.pipeline.handle_change(world.load("pods", split_pods()), 0.0)
    (resumed,) = world.incidents()
    # detected, re-detected as the suspend arrived (its pods still there), and resumed
    assert (resumed.id, resumed.status.value, resumed.detections) == (
        incident.id, "awaiting_approval", 3)
    world.load("pytorchjobs.v1.kubeflow.org", [])  # deleted: gone
    world.pipeline.handle_change(world.load("pods", []), 0.0)
    (gone,) = world.incidents()
    assert gone.status.value == "superseded"


def filler(name: str, node_name: str, zone: str, gpus: int, phase: str = "Running") -> dict[str, Any]:
    """A pod of another team's job holding `gpus` GPUs on `node_name`."""
    out = gpt_pod(name, "worker", node_name, zone)
    out["metadata"]["labels"]["training.kubeflow.org/job-name"] = "other"
    out["metadata"]["ownerReferences"][0]["name"] = "other"
    out["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": str(gpus)},
                                                 "limits": {"nvidia.com/gpu": str(gpus)}}
    out["status"] = {"phase": phase}
    return out


def test_a_split_waiting_for_room_is_diagnosed_again_when_a_pod_elsewhere_frees_its_gpus(
    world: World,
) -> None:
    """No zone has room for the split job (another job's pods hold the GPUs): its finding says
    so; when one of those pods finishes, the split job is diagnosed again in that batch (not at
    the next resync) and its proposal follows."""
    others = [filler("other-worker-0", "gpu-a1", "zone-a", 5),
              filler("other-worker-1", "gpu-b1", "zone-b", 5)]
    world.load("pods", split_pods() + others)
    world.pipeline.handle_change(Change(everything=True), 0.0)
    (incident,) = world.incidents(name="gpt-small")
    waiting = world.store.get_incident(incident.id).diagnosis
    assert waiting["remediable"] is False and waiting["target_zone"] is None
    assert any("no zone has 4 free GPUs" in r for r in waiting["reasons"])
    finished = [filler("other-worker-0", "gpu-a1", "zone-a", 5, phase="Succeeded"), others[1]]
    change = world.load("pods", split_pods() + finished)
    assert change.capacity and JOB not in change.jobs
    world.pipeline.handle_change(change, 0.0)
    room = world.store.get_incident(incident.id).diagnosis
    assert (room["remediable"], room["target_zone"]) == (True, "zone-a")


def test_alerts_open_and_close_their_own_incident(world: World) -> None:
    firing = Alert(AlertStatus.FIRING, {"alertname": "TrainingJobGPUUtilizationDrop", "severity": "warning", "namespace": "train"}, starts_at="t1", fingerprint="f1")
    world.pipeline.handle_alert(firing, [JOB])
    assert [(i.verdict.value, i.status.value) for i in world.incidents()] == [("alert", "open")]
    detail = world.store.get_incident(world.incidents()[0].id)
    assert detail.diagnosis["alert"]["name"] == "TrainingJobGPUUtilizationDrop"
    assert {m.payload["playbook"] for m in detail.messages} == {"gpu-utilization-drop"}
    world.pipeline.handle_alert(firing, [JOB])  # the same alert again: a re-detection
    assert len(world.incidents()) == 1
    world.pipeline.handle_alert(replace(firing, status=AlertStatus.RESOLVED), [JOB])
    assert [(i.verdict.value, i.status.value) for i in world.incidents()] == [("alert", "resolved")]


def test_sweep_reconciles_purges_and_enqueues_the_digest(world: World) -> None:
    digest = next(p for p in world.parts.playbooks if p.name == "daily-digest")
    summary = world.pipeline.sweep(digest)
    assert summary["jobs"] == 1 and summary["by_verdict"] == {"zone_split_blocked": 1}
    assert summary["incidents_opened"] == 1 and summary["metrics"] == "not configured"
    assert world.pipeline.sweep(None)["incidents_opened"] == 0
    claims = world.store.claim_messages(now=NOW + timedelta(minutes=1), limit=20,
                                        lease=timedelta(minutes=1))
    digests = [c.message for c in claims if c.message.kind is MessageKind.DIGEST]
    assert len(digests) == 1
    assert digests[0].payload["summary"]["jobs"] == 1
    assert digests[0].payload["open_incidents"][0]["name"] == "gpt-small"


def test_metrics_evidence_and_drops(tmp_path: Path) -> None:
    world = World(tmp_path, prometheus=True)
    try:
        # Prometheus down: the topology diagnosis goes on, the finding says why metrics are missing
        world.pipeline.refresh_metrics()
        world.pipeline.handle_change(Change(everything=True), 0.0)
        (incident,) = world.incidents()
        assert world.store.get_incident(incident.id).diagnosis["metrics"]["status"].startswith("metrics unavailable")
        # metrics arrive: evidence is attached, and a drop folds into the job's open incident
        world.pipeline.evidence.report = MetricsReport(
            available=True, at=NOW,
            jobs={JOB: JobMetrics(now=30.0, baseline=90.0, drop=DropVerdict(True, "below 70% of baseline", 0.33))},
        )
        world.pipeline.signals.drop(JOB, world.pipeline.evidence.report.jobs[JOB], world.pipeline.evidence.report)
        world.pipeline.evidence.attach(JOB)
        detail = world.store.get_incident(incident.id)
        evidence = [e.detail["metrics"] for e in detail.events if "metrics" in e.detail]
        assert evidence and evidence[-1]["utilization_now"] == 30.0 and evidence[-1]["utilization_baseline"] == 90.0
        # the idle GPU-hours estimated again from the evidence (the finding had no sample)
        (again,) = [e.detail["waste"] for e in detail.events if "waste" in e.detail]
        assert again["gpu_hours_basis"] == "4 GPU(s) x (90% baseline - 30% now) x 24 h"
        assert again["gpu_hours_per_day"] == pytest.approx(4 * 0.6 * 24)
        assert world.incidents(verdict=Verdict.GPU_UTILIZATION_DROP) == []
        (still,) = world.incidents()
        assert (still.id, still.verdict) == (incident.id, Verdict.ZONE_SPLIT_BLOCKED)
        seen = [e.detail.get("verdict") for e in detail.events if e.kind is EventKind.REDETECTED]
        assert "gpu_utilization_drop" in seen
        # a drop of a job with no open incident opens its own
        world.load("pytorchjobs.v1.kubeflow.org", [])
        world.pipeline.close_job(JOB, reason="gone")
        world.pipeline.signals.drop(JOB, world.pipeline.evidence.report.jobs[JOB], world.pipeline.evidence.report)
        drops = world.incidents(verdict=Verdict.GPU_UTILIZATION_DROP)
        assert len(drops) == 1 and drops[0].utilization_before == 30.0
    finally:
        world.store.close()


def test_utilization_before_is_measured_while_split_never_before(world: World) -> None:
    """The job ran fixed at 85% (a former incident's fix) until it split again: the new
    incident's "utilization before" is read from the samples taken since it opened, never from
    the window that still holds the fixed job."""
    opened = NOW.timestamp()
    world.pipeline.evidence.report = MetricsReport(available=True, at=NOW, jobs={JOB: JobMetrics(
        now=63.0, baseline=85.0, drop=DropVerdict(False, ""),
        samples=((opened - 40, 85.0), (opened - 20, 85.0), (opened - 5, 63.0)))})
    world.pipeline.handle_change(Change(everything=True), 0.0)
    (incident,) = world.incidents()
    assert incident.utilization_before is None  # no sample of the split yet
    world.now = NOW + timedelta(seconds=30)
    world.pipeline.evidence.report = MetricsReport(available=True, at=world.now, jobs={JOB: JobMetrics(
        now=1.0, baseline=85.0, drop=DropVerdict(False, ""),
        samples=((opened - 20, 85.0), (opened - 5, 63.0), (opened + 10, 2.0),
                 (opened + 25, 1.0)))})
    world.pipeline.handle_change(Change(jobs=frozenset({JOB})), 0.0)
    (again,) = world.incidents()
    assert (again.id, again.utilization_before) == (incident.id, 1.0)


DEV_JOB = JobRef(JobKind.PYTORCH, "dev", "gpt-small")
T = NOW.timestamp()


@pytest.mark.parametrize(
    ("samples", "steady"),
    [
        ([], True),  # a baseline alone: nothing to wait for
        ([(T - 3, 0.0), (T - 2, 0.0), (T - 1, 38.0)], False),  # the GPUs starting
        ([(T - 4, 0.0), (T - 3, 39.0), (T - 2, 41.0), (T - 1, 40.0)], True),
        ([(T - 2, 40.0), (T - 1, 41.0)], False),  # too few to tell
        ([(T - 590, 10.0), (T - 300, 60.0), (T - 1, 20.0)], True),  # never settles: watched long enough
    ],
)
def test_evidence_waits_for_a_steady_reading(samples: list[tuple[float, float]], steady: bool) -> None:
    metrics = JobMetrics(now=samples[-1][1] if samples else None, baseline=80.0,
                         drop=DropVerdict(False, "no drop"), samples=tuple(samples))
    assert steady_reading(metrics, now=T, window=timedelta(minutes=10)) is steady


def test_evidence_on_a_degraded_split_estimates_idle_gpu_hours_without_a_baseline(world: World) -> None:
    world.load("pods", dev_pods())
    world.pipeline.handle_change(Change(namespaces=frozenset({"dev"})), 0.0)
    (incident,) = world.incidents()
    detail = world.store.get_incident(incident.id)
    assert detail.diagnosis["waste"]["gpu_hours_basis"] == "not measured yet: no utilization sample of the job yet"
    world.pipeline.evidence.report = MetricsReport(available=True, at=NOW, jobs={
        DEV_JOB: JobMetrics(now=40.0, baseline=None, drop=DropVerdict(False, "no baseline"))})
    world.pipeline.evidence.attach(DEV_JOB)
    events = world.store.get_incident(incident.id).events
    (again,) = [e.detail["waste"] for e in events if "waste" in e.detail]
    assert again == {"gpu_hours_per_day": pytest.approx(4 * 0.6 * 24), "gpu_hours_basis":
                     "4 GPU(s) x 60% idle now x 24 h; no pre-split baseline, so an upper bound"}


def dev_pods() -> list[dict[str, Any]]:
    """The same split job in namespace dev, where no policy applies: zone_split_degraded."""
    pods = copy.deepcopy(split_pods())
    for p in pods:
        p["metadata"]["namespace"] = "dev"
    return pods


def test_a_batch_diagnoses_only_the_jobs_it_affects(world: World) -> None:
    world.load("pods", split_pods() + dev_pods())
    world.pipeline.handle_change(Change(jobs=frozenset({JOB})), 0.0)
    assert world.pipeline.diagnoser.diagnosed_last == 1
    assert [(i.namespace, i.verdict.value) for i in world.incidents()] == [("train", "zone_split_blocked")]
    world.pipeline.handle_change(Change(namespaces=frozenset({"dev"})), 0.0)
    assert world.pipeline.diagnoser.diagnosed_last == 1
    assert sorted((i.namespace, i.verdict.value) for i in world.incidents()) == [
        ("dev", "zone_split_degraded"),
        ("train", "zone_split_blocked"),
    ]
    world.pipeline.handle_change(Change(jobs=frozenset({JobRef(JobKind.TF, "elsewhere", "x")})), 0.0)
    assert world.pipeline.diagnoser.diagnosed_last == 0
    world.pipeline.handle_change(Change(everything=True), 0.0)
    assert world.pipeline.diagnoser.diagnosed_last == 2
    assert len(world.incidents()) == 2  # re-detections, not new incidents


def test_a_follower_records_nothing_and_a_cluster_wide_batch_catches_up(world: World) -> None:
    world.leading = False
    world.pipeline.handle_change(Change(everything=True), 0.0)
    world.pipeline.handle_change(Change(jobs=frozenset({JOB})), 0.0)
    # the scoped batch is diagnosed (the split kept), the cluster-wide one only parsed
    assert (world.pipeline.diagnoser.diagnoses, world.pipeline.followed.batches) == (1, 2)
    assert JOB in world.pipeline.problems.kept
    assert world.incidents() == []
    world.leading = True  # what the composition root submits on acquiring the lease
    world.pipeline.handle_change(Change(everything=True, reasons=("leadership acquired",)), 0.0)
    (incident,) = world.incidents()
    assert incident.status.value == "awaiting_approval"  # the zone-split playbook proposes
    detail = world.store.get_incident(incident.id)
    assert [e.kind.value for e in detail.events] == ["detected", "awaiting_approval"]


def test_a_cluster_wide_batch_reconciles_gone_jobs_once_synced(world: World) -> None:
    world.pipeline.handle_change(Change(jobs=frozenset({JOB})), 0.0)
    world.leading = False
    world.load("pytorchjobs.v1.kubeflow.org", [])
    world.pipeline.handle_change(world.load("pods", []), 0.0)  # the job goes while a follower
    assert [i.status.value for i in world.incidents()] == ["awaiting_approval"]
    world.leading = True
    world.pipeline.handle_change(Change(everything=True), 0.0)
    assert [i.status.value for i in world.incidents()] == ["awaiting_approval"]  # not synced yet
    world.cache.expect(R[name] for name in ("nodes", "namespaces", "pods", "pytorchjobs.v1.kubeflow.org"))
    assert world.cache.synced
    world.pipeline.handle_change(Change(everything=True), 0.0)
    assert [i.status.value for i in world.incidents()] == ["superseded"]


def _synced(world: World) -> None:
    world.cache.expect(R[name] for name in ("nodes", "namespaces", "pods", "pytorchjobs.v1.kubeflow.org"))
    assert world.cache.synced


def test_a_split_seen_while_following_and_deleted_before_the_hand_over_is_recorded_superseded(
    world: World,
) -> None:
    world.leading = False  # the leader records nothing (a blackout)
    world.pipeline.handle_change(Change(jobs=frozenset({JOB})), 0.0)  # the follower sees the split
    world.load("pytorchjobs.v1.kubeflow.org", [])
    world.pipeline.handle_change(world.load("pods", []), 0.0)  # and the job deleted
    assert world.incidents() == []
    world.leading = True
    _synced(world)
    world.pipeline.handle_change(Change(everything=True, reasons=("leadership acquired",)), 0.0)
    (incident,) = world.incidents()
    assert (incident.verdict.value, incident.status.value) == ("zone_split_blocked", "superseded")
    assert incident.uid == "job-uid-1"  # the uid the follower saw
    detail = world.store.get_incident(incident.id)
    assert [e.kind.value for e in detail.events] == ["detected", "superseded"]
    assert detail.events[-1].detail["reason"] == MissedReason.DELETED.value
    assert detail.messages == []  # no playbook fired: no post, no approval asked for a gone job
    assert world.pipeline.problems.kept == {}
    world.pipeline.handle_change(Change(everything=True), 0.0)  # recorded once
    assert len(world.incidents()) == 1


def test_a_split_seen_while_following_that_healed_before_the_hand_over_is_recorded_superseded(
    world: World,
) -> None:
    world.leading = False
    world.pipeline.handle_change(Change(jobs=frozenset({JOB})), 0.0)
    world.pipeline.handle_change(world.load("pods", job_pods("train", split=False)), 0.0)
    assert world.pipeline.problems.kept[JOB].healed
    world.leading = True
    _synced(world)
    world.pipeline.handle_change(Change(everything=True), 0.0)
    (incident,) = world.incidents()
    assert incident.status.value == "superseded"
    detail = world.store.get_incident(incident.id)
    assert detail.events[-1].detail["reason"] == MissedReason.HEALED.value


def test_a_split_the_leader_recorded_is_not_recorded_again_by_the_next_leader(world: World) -> None:
    world.pipeline.handle_change(Change(jobs=frozenset({JOB})), 0.0)  # the leader records it
    world.leading = False
    world.pipeline.handle_change(Change(jobs=frozenset({JOB})), 0.0)  # seen again while following
    world.load("pytorchjobs.v1.kubeflow.org", [])
    world.pipeline.handle_change(world.load("pods", []), 0.0)
    world.leading = True
    _synced(world)
    world.pipeline.handle_change(Change(everything=True), 0.0)
    # the leader's incident is superseded (the job is gone); no second one
    assert [i.status.value for i in world.incidents()] == ["superseded"]
    assert world.pipeline.problems.kept == {}


def job_pods(namespace: str, *, split: bool) -> list[dict[str, Any]]:
    """The gpt-small job in `namespace`: split (master in zone-b) or co-located in zone-a."""
    pods = copy.deepcopy(split_pods())
    for p in pods:
        p["metadata"]["namespace"] = namespace
        if not split:
            p["spec"]["nodeName"], p["metadata"]["labels"]["zone"] = "gpu-a1", "zone-a"
    return pods


def several_jobs(world: World) -> None:
    """Four jobs: split in `train` (blocked by its policy) and in `dev` and `lab` (degraded),
    healthy in `ok`."""
    world.load("pods", split_pods() + job_pods("dev", split=True) + job_pods("lab", split=True)
               + job_pods("ok", split=False))
    world.cache.expect(R[name] for name in ("nodes", "namespaces", "pods", "pytorchjobs.v1.kubeflow.org"))


class Calls:
    """Counts a store's incident listings and the order it records findings in (the real
    store's methods, called through)."""

    def __init__(self, world: World) -> None:
        self.listings = 0
        self.transactions = 0  # record_findings calls
        self.recorded: list[str] = []
        store = world.store
        list_incidents, record_finding = store.list_incidents, store.record_finding
        record_findings = store.record_findings

        def counting_list(query: IncidentQuery) -> Any:
            self.listings += 1
            return list_incidents(query)

        def ordered_record(record: Any) -> Any:
            self.recorded.append(record.namespace)
            return record_finding(record)

        def ordered_records(records: Any, **options: Any) -> Any:
            self.recorded.extend(record.namespace for record in records)
            self.transactions += 1
            return record_findings(records, **options)

        store.list_incidents = counting_list  # type: ignore[method-assign]
        store.record_finding = ordered_record  # type: ignore[method-assign]
        store.record_findings = ordered_records  # type: ignore[method-assign]


def test_a_cluster_wide_batch_reads_open_incidents_once_and_records_new_problems_first(world: World) -> None:
    several_jobs(world)
    world.pipeline.handle_change(Change(namespaces=frozenset({"dev", "lab"})), 0.0)  # open already
    calls = Calls(world)
    world.pipeline.handle_change(Change(everything=True, reasons=("leadership acquired",)), 0.0)
    # one listing before recording, one to reconcile: not one per job
    assert calls.listings == 2
    # the new split first, then the re-detections (the healthy job records nothing), together
    assert calls.recorded == ["train", "dev", "lab"]
    assert calls.transactions == 1
    assert sorted((i.namespace, i.verdict.value, i.status.value) for i in world.incidents()) == [
        ("dev", "zone_split_degraded", "awaiting_approval"),
        ("lab", "zone_split_degraded", "awaiting_approval"),
        ("train", "zone_split_blocked", "awaiting_approval"),
    ]
    # the healthy job's resolve read the batch's listing too: co-locating a split job resolves it
    world.load("pods", split_pods() + job_pods("dev", split=False) + job_pods("lab", split=True)
               + job_pods("ok", split=False))
    world.pipeline.handle_change(Change(everything=True), 0.0)
    assert {i.namespace: i.status.value for i in world.incidents()}["dev"] == "resolved"


def test_the_first_cluster_wide_batch_records_what_a_sweep_records(tmp_path: Path) -> None:
    batch, sweep = World(tmp_path / "batch"), World(tmp_path / "sweep")
    try:
        for world in (batch, sweep):
            several_jobs(world)
        batch.pipeline.handle_change(Change(everything=True, reasons=("start-up",)), 0.0)
        sweep.pipeline.sweep(None)

        def recorded(world: World) -> list[tuple[Any, ...]]:
            return sorted((i.namespace, i.name, i.verdict.value, i.status.value, i.target_zone,
                           len(world.store.get_incident(i.id).messages)) for i in world.incidents())

        assert recorded(batch) == recorded(sweep)
        assert len(recorded(batch)) == 3
    finally:
        batch.store.close()
        sweep.store.close()


def test_a_new_leader_records_what_changed_while_it_followed_before_diagnosing_everything(world: World) -> None:
    several_jobs(world)
    world.pipeline.handle_change(Change(namespaces=frozenset({"dev", "lab"})), 0.0)  # open already
    world.leading = False
    # its first batch as a follower is cluster-wide (the start-up's): nothing to put first
    world.pipeline.handle_change(Change(everything=True, jobs=frozenset({DEV_JOB})), 0.0)
    # the split in `train` appears while this replica follows (and the old leader is gone)
    world.load("pods", split_pods() + job_pods("dev", split=True) + job_pods("lab", split=True)
               + job_pods("ok", split=False))
    world.pipeline.handle_change(Change(jobs=frozenset({JOB})), 0.0)
    assert world.pipeline.followed.batches == 2 and world.incidents(namespace="train") == []
    world.leading = True
    calls = Calls(world)
    diagnosed: list[int] = []
    diagnose = world.pipeline.diagnose

    def counting(scope: Any = None) -> Any:
        found = diagnose(scope)
        diagnosed.append(len(found))
        return found

    world.pipeline.diagnose = counting  # type: ignore[method-assign]
    world.pipeline.handle_change(Change(everything=True, reasons=("leadership acquired",)), 0.0)
    # first the job it saw change (one job diagnosed), then every job; recorded once each
    assert diagnosed == [1, 4]
    assert calls.recorded == ["train", "dev", "lab"]
    assert sorted((i.namespace, i.status.value) for i in world.incidents()) == [
        ("dev", "awaiting_approval"), ("lab", "awaiting_approval"), ("train", "awaiting_approval")]
    # remembered once: the next cluster-wide batch diagnoses everything in one go
    diagnosed.clear()
    world.pipeline.handle_change(Change(everything=True), 0.0)
    assert diagnosed == [4]


def _beyla_openmetrics(now: int) -> str:
    """Beyla's flow counter with zones: each dev worker (zone-a) sends its master (zone-b)
    1 MB/s; the master answers 0.5 MB/s to worker 0; one worker talks to a stranger."""
    rows = [(f"gpt-small-worker-{i}", "gpt-small-master-0", "zone-a", "zone-b", 1e6) for i in range(3)]
    rows += [("gpt-small-master-0", "gpt-small-worker-0", "zone-b", "zone-a", 5e5),
             ("gpt-small-worker-1", "store-0", "zone-a", "zone-c", 9e6)]
    lines = ["# TYPE beyla_network_flow_bytes counter"]
    for src, dst, src_zone, dst_zone, rate in rows:
        owner = "store" if dst == "store-0" else "gpt-small"
        labels = (f'k8s_src_namespace="dev",k8s_src_owner_name="gpt-small",k8s_src_name="{src}",'
                  f'k8s_dst_namespace="dev",k8s_dst_owner_name="{owner}",k8s_dst_name="{dst}",'
                  f'src_zone="{src_zone}",dst_zone="{dst_zone}"')
        lines += [f"beyla_network_flow_bytes_total{{{labels}}} {rate * (t - now + 7200):.0f} {t}"
                  for t in range(now - 7200, now + 1, 30)]
    return "\n".join(lines) + "\n# EOF\n"


@requires_prometheus
def test_measured_egress_reaches_the_finding_the_timeline_and_the_gauges(tmp_path: Path) -> None:
    """Detected before any measurement (unknown: no step rate), then the egress meter measures the
    job's own cross-zone flows: the finding is recorded again with the measured figure, a
    re-detection event says so (its chat message is re-rendered after it), the incident's cost
    and the split-job gauges follow; co-located, the gauges go."""
    now = int(datetime.now(UTC).timestamp()) // 30 * 30
    with running_prometheus(tmp_path, openmetrics=_beyla_openmetrics(now)) as prom:
        world = World(tmp_path, prometheus=prom.url)
        try:
            world.now = datetime.fromtimestamp(now, UTC)
            world.load("pods", dev_pods())
            world.pipeline.handle_change(Change(everything=True), 0.0)
            (incident,) = world.incidents()
            waste = world.store.get_incident(incident.id).diagnosis["waste"]
            assert waste["egress_source"] == "unknown"
            assert waste["egress_unmeasured"] == "not measured yet (the first egress query is pending)"

            world.pipeline.refresh_metrics()  # utilization (none) and the egress query
            detail = world.store.get_incident(incident.id)
            waste = detail.diagnosis["waste"]
            assert waste["egress_source"] == "measured" and waste["egress_measured_by"] == "beyla"
            # 3 x 1 MB/s + 0.5 MB/s between the job's pods = 302.4 GB/day; $0.01/GB each way
            assert waste["cross_zone_gb_per_day"] == pytest.approx(302.4, rel=0.05)
            assert waste["egress_usd_per_day"] == pytest.approx(6.048, rel=0.05)
            assert waste["egress_basis"].startswith("measured by Beyla over the last 1h: 302 GB/day")
            assert detail.incident.estimated_cost == pytest.approx(6.048, rel=0.05)
            (moved,) = [e for e in detail.events if "egress" in e.detail]
            assert moved.kind is EventKind.REDETECTED and moved.actor == "zonemedic"
            assert moved.detail["egress"]["source"] == "measured"
            labels = {"namespace": "dev", "kind": "PyTorchJob", "job": "gpt-small", "source": "measured"}
            cost = world.metrics.registry.get_sample_value("zonemedic_job_egress_usd_per_day", labels)
            rate = world.metrics.registry.get_sample_value(
                "zonemedic_job_cross_zone_bytes_per_second", labels)
            assert cost == pytest.approx(6.048, rel=0.05) and rate == pytest.approx(3.5e6, rel=0.05)

            world.pipeline.refresh_metrics()  # the same figure: nothing recorded again
            after = world.store.get_incident(incident.id)
            assert len([e for e in after.events if "egress" in e.detail]) == 1

            co_located = dev_pods()
            co_located[0]["spec"]["nodeName"] = "gpu-a1"
            world.load("pods", co_located)
            world.pipeline.handle_change(Change(everything=True), 0.0)
            assert world.metrics.registry.get_sample_value(
                "zonemedic_job_egress_usd_per_day", labels) is None
        finally:
            world.store.close()


DROP = PacketDrop("train", "gpt-small-master-0", "Incoming packet dropped (policy_denied) from "
                  "train/gpt-small-worker-0 (10.0.1.4) TCP/23456.", count=1, event="m.1")


def drop_events(world: World, incident: int) -> list[Any]:
    return [e for e in world.store.get_incident(incident).events
            if e.kind is EventKind.EVIDENCE and e.actor == "cilium"]


def test_packet_drops_re_diagnose_their_job_and_reach_its_timeline_once(world: World) -> None:
    # before the job's incident exists: a hint to diagnose it, the message kept
    again = world.pipeline.handle_packet_drops([DROP])
    assert again.jobs == {JOB} and not again.namespaces
    assert world.incidents() == []
    world.pipeline.handle_change(again, 0.0)
    (incident,) = world.incidents()
    (written,) = drop_events(world, incident.id)
    assert written.detail["packet_drop"] == DROP.message
    assert written.detail["pod"] == "train/gpt-small-master-0"
    # the emitter's repeats (count bumped) and a relist add nothing, even after a restart
    world.pipeline.handle_packet_drops([replace(DROP, count=2), DROP])
    restarted = build_pipeline(world.parts, world.store, now=lambda: world.now)
    restarted.handle_change(Change(everything=True), 0.0)
    restarted.handle_packet_drops([replace(DROP, count=3)])
    assert len(drop_events(world, incident.id)) == 1
    # another message for the job: a second event
    other = replace(DROP, pod="gpt-small-worker-1", message=DROP.message.replace("0 (", "2 ("))
    restarted.handle_packet_drops([other])
    assert [e.detail["pod"] for e in drop_events(world, incident.id)] == [
        "train/gpt-small-master-0", "train/gpt-small-worker-1"]
    # a pod of no job: its namespace is re-diagnosed (generic groups live there), nothing written
    stray = restarted.handle_packet_drops([replace(DROP, pod="someone-else")])
    assert (stray.jobs, stray.namespaces) == (frozenset(), frozenset({"train"}))
    counts = {o: world.metrics.registry.get_sample_value("zonemedic_packet_drop_events_total",
                                                         {"outcome": o}) for o in ("job", "namespace")}
    assert counts == {"job": 5.0, "namespace": 1.0}


def test_a_follower_keeps_drop_messages_for_when_it_leads(world: World) -> None:
    world.pipeline.handle_change(Change(jobs=frozenset({JOB})), 0.0)
    (incident,) = world.incidents()
    world.leading = False
    assert world.pipeline.handle_packet_drops([DROP]).jobs == {JOB}
    assert drop_events(world, incident.id) == []
    world.leading = True
    world.pipeline.handle_change(Change(everything=True, reasons=("leadership acquired",)), 0.0)
    assert [e.detail["packet_drop"] for e in drop_events(world, incident.id)] == [DROP.message]


@pytest.mark.parametrize(
    ("before", "after", "moved"),
    [
        ((EgressBasis.ESTIMATED, 10.0), (EgressBasis.MEASURED, 10.0), True),  # another basis
        ((EgressBasis.UNKNOWN, None), (EgressBasis.ESTIMATED, 0.0), True),  # a figure appears
        ((EgressBasis.MEASURED, 10.0), (EgressBasis.MEASURED, 11.9), False),  # within 20%
        ((EgressBasis.MEASURED, 10.0), (EgressBasis.MEASURED, 12.5), True),
        ((EgressBasis.MEASURED, 0.0), (EgressBasis.MEASURED, 0.005), False),  # below a cent
        ((EgressBasis.MEASURED, 0.0), (EgressBasis.MEASURED, 0.5), True),
        ((EgressBasis.UNKNOWN, None), (EgressBasis.UNKNOWN, None), False),
    ],
)
def test_egress_moved(before: tuple[EgressBasis, float | None],
                      after: tuple[EgressBasis, float | None], moved: bool) -> None:
    assert egress_moved(before, after) is moved


def test_a_lying_zone_label_is_its_own_incident_with_its_playbook_and_resolves_relabelled(
    world: World,
) -> None:
    lying = [gpt_pod("gpt-small-master-0", "master", "gpu-a1", "zone-b"), *split_pods()[1:]]
    world.pipeline.handle_change(world.load("pods", lying), 0.0)
    (incident,) = world.incidents()
    assert (incident.verdict, incident.status.value, incident.target_zone) == (
        Verdict.ZONE_LABEL_MISMATCH, "awaiting_approval", "zone-a")
    detail = world.store.get_incident(incident.id)
    assert detail.diagnosis["mislabelled_pods"][0]["pod"] == "gpt-small-master-0"
    posts = {m.payload["playbook"] for m in detail.messages if m.kind is MessageKind.POST}
    assert posts == {"zone-label-mismatch"}
    relabelled = [gpt_pod("gpt-small-master-0", "master", "gpu-a1", "zone-a"), *split_pods()[1:]]
    world.pipeline.handle_change(world.load("pods", relabelled), 0.0)
    (after,) = world.incidents()
    assert after.status.value == "resolved"


def test_an_unreadable_policy_marks_the_recorded_finding_uncertain_and_stops_nothing(
    world: World,
) -> None:
    broken = {"apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
              "metadata": {"name": "newer", "namespace": "train"},
              "spec": {"endpointSelector": {}, "ingress": [{"fromEndpoints": [{}], "futureField": 1}]}}
    world.load("ciliumnetworkpolicies.v2.cilium.io", [POLICY, broken])
    world.pipeline.handle_change(Change(everything=True), 0.0)
    (incident,) = world.incidents()
    assert incident.verdict is Verdict.ZONE_SPLIT_BLOCKED  # the readable policy still decides
    uncertain = world.store.get_incident(incident.id).diagnosis["uncertain"]
    assert uncertain == [{"policy": "CiliumNetworkPolicy/train/newer",
                          "field": "spec.ingress[0].futureField", "problem": "unknown field"}]
