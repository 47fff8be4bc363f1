"""The agent end to end on the twin with the real remediator: `seed-blocked` is detected, the
zone-split playbook requests approval, a person approves from the CLI (another process), and the
leader's executor co-locates the job: the incident ends `resolved`, every pod in the target zone,
the job not suspended. The agent runs with leader election on a Lease, as in a cluster."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agent.model.incident import IncidentQuery
from agent.model.lifecycle import IncidentStatus
from agent.runtime import executor, expiry
from agent.runtime.app import Agent, Parts
from agent.runtime.pipeline import AgentPipeline
from agent.store.migrate import upgrade_on_start
from agent.store.repository import IncidentStore
from agent.twin import kubeconfig
from agent.twin.cluster import TwinCluster
from agent.twin.resources import lookup
from tests.remediation.harness import FAST, ZONE, quick
from tests.runtime.test_agent_e2e import agent_settings

REPO = Path(__file__).resolve().parents[2]
S = IncidentStatus
PODS = lookup("pods")
PYTORCHJOBS = lookup("pytorchjobs")


def _wait(check: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[TwinCluster, Agent, IncidentStore, str]]:
    cluster = TwinCluster(quick("seed-blocked")).start()
    try:
        api = cluster.serve_api()
        path = kubeconfig.write(tmp_path / "kubeconfig", api.url)
        settings = agent_settings(tmp_path, path, None)
        remediation = replace(settings.remediation, **{
            name: getattr(FAST, name) for name in (
                "suspend_timeout", "schedule_timeout", "verify_window", "poll_interval")})
        settings = replace(settings, remediation=remediation)
        store = upgrade_on_start(settings)

        def pipeline(parts: Parts) -> AgentPipeline:
            executor.register(parts, store, executor.live_remediator(parts, store))
            expiry.register(parts, store)
            return AgentPipeline(parts, store)

        agent = Agent(settings, pipeline_factory=pipeline, identity="solo")
        agent.start()
        try:
            yield cluster, agent, store, settings.database.url
        finally:
            agent.stop()
            store.close()
    finally:
        cluster.stop()


def _awaiting(store: IncidentStore) -> int | None:
    listing = store.list_incidents(IncidentQuery(status=S.AWAITING_APPROVAL, limit=5))
    return listing.incidents[0].id if listing.incidents else None


def _pod_zones(cluster: TwinCluster) -> set[str]:
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"].get(ZONE)
             for n in cluster.store.list(lookup("nodes"))[0]}
    pods: list[dict[str, Any]] = cluster.store.list(PODS, namespace="ml")[0]
    return {str(nodes.get(p["spec"].get("nodeName"))) for p in pods
            if not p["metadata"].get("deletionTimestamp")}


def test_a_cli_approval_is_remediated_by_the_leader(
    running: tuple[TwinCluster, Agent, IncidentStore, str],
) -> None:
    cluster, agent, store, url = running
    _wait(agent.elector.is_leader, 15, "the lease")
    _wait(lambda: _awaiting(store) is not None, 30, "an incident awaiting approval")
    incident_id = _awaiting(store)
    assert incident_id is not None
    summary = store.get_incident(incident_id).incident
    assert summary.approval_deadline is not None and summary.target_zone is not None
    assert len(_pod_zones(cluster)) == 2  # split
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", "incidents", "approve", str(incident_id),
         "--by", "carol", "--reason", "co-locate it", "--database", url],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    _wait(lambda: store.get_incident(incident_id).incident.status in (
        S.RESOLVED, S.FAILED, S.ROLLED_BACK), 60, "the remediation to end")
    detail = store.get_incident(incident_id)
    assert detail.incident.status is S.RESOLVED, [
        (e.kind.value, dict(e.detail)) for e in detail.events]
    assert _pod_zones(cluster) == {summary.target_zone}
    (job,) = cluster.store.list(PYTORCHJOBS, namespace="ml")[0]
    assert not (job["spec"].get("runPolicy") or {}).get("suspend")
    kinds = [e.kind.value for e in detail.events]
    assert kinds.index("approved") < kinds.index("remediation_started") < kinds.index("resolved")
