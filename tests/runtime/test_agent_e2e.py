"""End to end on the twin: the agent in-process, the twin over real HTTP, real Prometheus, SQLite.

`seed-blocked` and `seed-degraded`: the split is recorded as an incident soon after the last pod's
binding (asserted loosely here; `bench/agent_detection.py` reports it precisely), utilization
evidence appears once Prometheus has samples, and /readyz, /metrics and the incidents API answer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.runtime.app import Agent
from agent.twin.resources import lookup
from tests.support.agent_rig import running_agent
from tests.support.prometheus import requires_prometheus
from tests.support.waiting import wait
from tests.twin import twin_fixtures as fixtures

JOB = "llm-finetune"


class Running:
    def __init__(self, cluster: Any, agent: Agent, store: Any, binds: dict[str, float], jobs: list[dict[str, Any]]) -> None:
        self.cluster = cluster
        self.jobs = jobs
        self.agent = agent
        self.store = store
        self.binds = binds
        self.http = httpx.Client(base_url=agent.url, timeout=10)

    def incidents(self) -> list[dict[str, Any]]:
        return list(self.http.get("/api/incidents", params={"job": f"ml/{JOB}"}).json()["incidents"])

    def wait(self, check: Any, timeout: float = 30.0) -> Any:
        return wait(check, timeout=timeout,
                    what=lambda: f"the check; last incidents: {self.incidents()}")


def run_agent(tmp_path: Path, scenario: str) -> Iterator[Running]:
    binds: dict[str, float] = {}
    lock = threading.Lock()

    def on_pod(event: Any) -> None:
        obj = event.object
        if (obj.get("spec") or {}).get("nodeName") and obj["metadata"]["namespace"] == "ml":
            with lock:
                binds.setdefault(obj["metadata"]["name"], time.time())

    full = fixtures.fast(scenario)
    jobs = [o for o in full.objects if o.get("kind") == "PyTorchJob"]
    without_jobs = replace(full, objects=[o for o in full.objects if o not in jobs])
    with running_agent(tmp_path, without_jobs, prometheus=True) as rig:
        # no pod exists before its job: every bind is seen from here on
        unsubscribe = rig.cluster.store.subscribe(lookup("pods"), on_pod)
        try:
            for job in jobs:  # the job arrives while the agent watches
                rig.cluster.apply(job)
            running = Running(rig.cluster, rig.agent, rig.store, binds, jobs)
            try:
                yield running
            finally:
                running.http.close()
        finally:
            unsubscribe()


@pytest.fixture
def blocked(tmp_path: Path) -> Iterator[Running]:
    yield from run_agent(tmp_path, "seed-blocked")


@pytest.fixture
def degraded(tmp_path: Path) -> Iterator[Running]:
    yield from run_agent(tmp_path, "seed-degraded")


def _opened(run: Running, verdict: str) -> dict[str, Any] | None:
    for incident in run.incidents():
        if incident["verdict"] == verdict:
            return incident
    return None


def _has_metrics_evidence(run: Running, incident_id: int) -> bool:
    detail = run.http.get(f"/api/incidents/{incident_id}").json()
    for event in detail["events"]:
        metrics = (event.get("detail") or {}).get("metrics") or {}
        if metrics.get("status") == "ok" and metrics.get("utilization_now") is not None:
            return True
    return (detail["diagnosis"].get("metrics") or {}).get("status") == "ok"


@requires_prometheus
def test_seed_blocked_is_an_incident_soon_after_binding_with_metrics_evidence(blocked: Running) -> None:
    from datetime import datetime

    incident = blocked.wait(lambda: _opened(blocked, "zone_split_blocked"))
    assert incident["target_zone"] == "us-east-1a"
    last_bind = max(blocked.binds.values())
    opened = datetime.fromisoformat(incident["opened_at"]).timestamp()
    assert opened - last_bind < 2.5, f"detection took {opened - last_bind:.3f}s"
    # exactly one open incident for the job, however many pod events there were (a diagnosis
    # made while the pods were still binding may have opened one that the split superseded)
    assert [i["verdict"] for i in blocked.incidents() if i["closed_at"] is None] == [
        "zone_split_blocked"]
    blocked.wait(lambda: _has_metrics_evidence(blocked, incident["id"]), timeout=40)
    ready = blocked.http.get("/readyz")
    assert ready.status_code == 200, ready.text
    text = blocked.http.get("/metrics").text
    assert "zonemedic_leader 1.0" in text
    assert 'zonemedic_findings_total{verdict="zone_split_blocked"}' in text
    assert "zonemedic_detection_latency_seconds_count" in text


@requires_prometheus
def test_the_running_agent_explains_the_flows_its_incident_denies(blocked: Running) -> None:
    """`GET /api/explain` of the running agent (built by the composition root) answers from the
    same evaluator as its diagnosis: each denied flow of the incident, the same hop and policies."""
    incident = blocked.wait(lambda: _opened(blocked, "zone_split_blocked"))
    detail = blocked.http.get(f"/api/incidents/{incident['id']}").json()
    denied = detail["diagnosis"]["denied_flows"]
    assert denied
    for flow in denied:
        answer = blocked.http.get("/api/explain", params={
            "from": f"ml/{flow['from_pod']}", "to": f"ml/{flow['to_pod']}",
            "port": f"{flow['port']}/{flow['protocol']}"})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        first = next(h for h in body["hops"] if h["verdict"] != "allowed")
        assert body["allowed"] is False
        assert (first["hop"], first["verdict"], first["policies"]) == (
            flow["hop"], flow["reason"], flow["policies"])
    # `POST /api/whatif` of the same agent: deleting the policy that denies the first flow opens
    # it (a what-if: the incident's flows are still denied afterwards)
    policy = denied[0]["policies"][0]
    whatif = blocked.http.post("/api/whatif", json={"delete": policy})
    assert whatif.status_code == 200, whatif.text
    opened = {(f["from"], f["to"]) for f in whatif.json()["flows"] if f["flow"] == "required"
              and f["before"]["allowed"] is False and f["after"]["allowed"] is True}  # fmt: skip
    assert (f"ml/{denied[0]['from_pod']}", f"ml/{denied[0]['to_pod']}") in opened
    again = blocked.http.get("/api/explain", params={
        "from": f"ml/{denied[0]['from_pod']}", "to": f"ml/{denied[0]['to_pod']}",
        "port": f"{denied[0]['port']}/{denied[0]['protocol']}"})
    assert again.json()["allowed"] is False


@requires_prometheus
def test_seed_degraded_is_recorded_as_degraded(degraded: Running) -> None:
    incident = degraded.wait(lambda: _opened(degraded, "zone_split_degraded"))
    detail = degraded.http.get(f"/api/incidents/{incident['id']}").json()
    assert detail["diagnosis"]["verdict"] == "zone_split_degraded"
    assert detail["diagnosis"]["zones"] == {"us-east-1a": 4, "us-east-1b": 1}
    degraded.wait(lambda: _has_metrics_evidence(degraded, incident["id"]), timeout=40)


@requires_prometheus
def test_sweep_budget_no_list_request_and_at_most_3_prometheus_queries(degraded: Running) -> None:
    import copy

    job = degraded.jobs[0]
    for i in range(5):  # more jobs: the budget must not grow with them
        extra = copy.deepcopy(job)
        extra["metadata"]["name"] = f"extra-{i}"
        degraded.cluster.apply(extra)
    degraded.wait(lambda: len(degraded.agent.cache.job_keys()) >= 6 and degraded.agent.cache.synced)
    # every job has its pods (a sweep diagnoses the jobs with live pods) before anything is counted
    cache = degraded.agent.cache
    degraded.wait(lambda: all(cache.pods_of_job(k) for k in cache.job_keys()))
    # only the sweep may talk to the API server and Prometheus while it is measured: stop the
    # detector and the scheduler (its metric refresh), each after its running step
    degraded.agent.detector.stop()
    degraded.agent.scheduler.shutdown(wait=True)
    api = degraded.cluster.api
    registry = degraded.agent.metrics.registry

    def queries() -> float:
        return sum(
            registry.get_sample_value("zonemedic_prometheus_queries_total", {"outcome": o}) or 0.0
            for o in ("ok", "error")
        )

    before = queries()
    api.accounting.reset()
    summary = degraded.agent.pipeline.sweep(None)
    counts = api.accounting.snapshot()
    after = queries()
    assert summary["jobs"] >= 6, summary
    # the extra jobs' incidents may be opened by this sweep (then previewed) or the detector
    assert_only_preview_reads(counts, opened=summary["incidents_opened"])
    assert after - before <= 3
    assert summary["metrics"] == "ok"
    api.accounting.reset()
    again = degraded.agent.pipeline.sweep(None)
    assert_only_preview_reads(api.accounting.snapshot(), opened=again["incidents_opened"])


def assert_only_preview_reads(counts: dict[str, int], *, opened: int) -> None:
    """A sweep's diagnosis reads the cache only: its only API reads are the plan previews of the
    incidents it opened (per incident the job and its pods; the nodes and the target zone's pods
    shared by the burst). A sweep that opens nothing lists nothing."""
    lists = {k: v for k, v in counts.items() if k.startswith("list ")}
    assert set(lists) <= {"list nodes", "list pods"}, counts
    assert lists.get("list nodes", 0) <= opened, counts
    zone_nodes = 2  # us-east-1a
    assert lists.get("list pods", 0) <= opened * (1 + zone_nodes), counts
    assert counts.get("get pytorchjobs", 0) <= opened, counts


@requires_prometheus
def test_seed_blocked_timeline_carries_ciliums_packet_drop_messages(blocked: Running) -> None:
    """The twin's dataplane emits Cilium's PacketDrop Events for the denied flows; the agent reads
    them (server-side selected) and writes each message once into the incident's timeline."""
    incident = blocked.wait(lambda: _opened(blocked, "zone_split_blocked"))

    def drops() -> list[dict[str, Any]]:
        detail = blocked.http.get(f"/api/incidents/{incident['id']}").json()
        return [e for e in detail["events"] if e["kind"] == "evidence" and e["actor"] == "cilium"]

    blocked.wait(lambda: bool(drops()), timeout=40)
    for event in drops():
        message = event["detail"]["packet_drop"]
        assert message.startswith("Incoming packet dropped (policy_denied) from ml/llm-finetune-")
        assert message.endswith(".") and event["detail"]["pod"].startswith("ml/llm-finetune-")
    texts = [e["detail"]["packet_drop"] for e in drops()]
    assert len(texts) == len(set(texts))  # once each, however often Cilium repeats it
    registry = blocked.agent.metrics.registry
    assert (registry.get_sample_value("zonemedic_packet_drop_events_total", {"outcome": "job"})
            or 0) >= 1


@requires_prometheus
def test_seed_degraded_waste_is_measured_from_the_twins_beyla_counters(degraded: Running) -> None:
    incident = degraded.wait(lambda: _opened(degraded, "zone_split_degraded"))

    def waste() -> dict[str, Any]:
        detail = degraded.http.get(f"/api/incidents/{incident['id']}").json()
        found: dict[str, Any] = detail["diagnosis"].get("waste") or {}
        return found

    degraded.wait(lambda: waste().get("egress_source") == "measured", timeout=40)
    measured = waste()
    assert measured["egress_measured_by"] == "beyla" and measured["cross_zone_gb_per_day"] > 0
    assert measured["egress_basis"].startswith("measured by Beyla over the last 1h: ")
    text = degraded.http.get("/metrics").text
    assert 'zonemedic_job_egress_usd_per_day{job="llm-finetune",kind="PyTorchJob"' in text
