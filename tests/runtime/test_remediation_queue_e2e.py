"""The agent end to end on the twin with the real remediator and a real Prometheus scraping the
twin's exporter: `seed-blocked` is detected, the zone-split playbook requests approval, a person
approves from the CLI (another process), and the leader's executor co-locates the job: the
incident ends `resolved`, every pod in the target zone, the job not suspended, and the incident
records the job's GPU utilization from Prometheus before (blocked, near 0%) and after (recovered,
at least 80%). The agent runs with leader election on a Lease, as in a cluster."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.model.incident import IncidentQuery
from agent.model.lifecycle import IncidentStatus, RemediationActionKind
from agent.sources.prometheus import job_utilization_expr
from agent.store.repository import IncidentStore
from agent.twin.cluster import TwinCluster
from agent.twin.resources import lookup
from tests.remediation.harness import ZONE
from tests.support.agent_rig import RunningAgent, running_agent
from tests.support.prometheus import requires_prometheus
from tests.support.waiting import wait

REPO = Path(__file__).resolve().parents[2]
S = IncidentStatus
PODS = lookup("pods")
PYTORCHJOBS = lookup("pytorchjobs")
JOB = "llm-finetune"


@pytest.fixture
def running(tmp_path: Path) -> Iterator[RunningAgent]:
    with running_agent(tmp_path, "seed-blocked", prometheus=True, executor=True,
                       identity="solo") as rig:  # fmt: skip
        yield rig


def _awaiting(store: IncidentStore) -> int | None:
    listing = store.list_incidents(IncidentQuery(status=S.AWAITING_APPROVAL, limit=5))
    return listing.incidents[0].id if listing.incidents else None


def _pod_zones(cluster: TwinCluster) -> set[str]:
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"].get(ZONE)
             for n in cluster.store.list(lookup("nodes"))[0]}
    pods: list[dict[str, Any]] = cluster.store.list(PODS, namespace="ml")[0]
    return {str(nodes.get(p["spec"].get("nodeName"))) for p in pods
            if not p["metadata"].get("deletionTimestamp")}


def _job_utilization(result: list[dict[str, Any]]) -> float | None:
    for sample in result:
        if sample["metric"].get("created_by_name") == JOB:
            return float(sample["value"][1])
    return None


@requires_prometheus
def test_a_cli_approval_is_remediated_by_the_leader_with_utilization_from_prometheus(
    running: RunningAgent,
) -> None:
    cluster, agent, store = running.cluster, running.agent, running.store
    assert running.prometheus is not None
    wait(agent.elector.is_leader, timeout=15, what="the lease")
    incident_id = wait(lambda: _awaiting(store), timeout=30,
                       what="an incident awaiting approval")
    summary = store.get_incident(incident_id).incident
    assert summary.approval_deadline is not None and summary.target_zone is not None
    assert len(_pod_zones(cluster)) == 2  # split
    # the person approves once Prometheus shows the split job's utilization (what they look at)
    running.prometheus.wait_for(job_utilization_expr(),
                                lambda r: _job_utilization(r) is not None, timeout=30)
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", "incidents", "approve", str(incident_id),
         "--by", "carol", "--reason", "co-locate it", "--database", running.settings.database.url],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    wait(lambda: store.get_incident(incident_id).incident.status in (
        S.RESOLVED, S.FAILED, S.ROLLED_BACK), timeout=60, what="the remediation to end")
    detail = store.get_incident(incident_id)
    assert detail.incident.status is S.RESOLVED, [
        (e.kind.value, dict(e.detail)) for e in detail.events]
    assert _pod_zones(cluster) == {summary.target_zone}
    (job,) = cluster.store.list(PYTORCHJOBS, namespace="ml")[0]
    assert not (job["spec"].get("runPolicy") or {}).get("suspend")
    kinds = [e.kind.value for e in detail.events]
    assert kinds.index("approved") < kinds.index("remediation_started") < kinds.index("resolved")

    # utilization from Prometheus, in the incident and in the executor's plan and verification
    before, after = detail.incident.utilization_before, detail.incident.utilization_after
    assert isinstance(before, float) and 0.0 <= before <= 5.0, before  # blocked: GPUs idle
    assert isinstance(after, float) and after >= 80.0, after  # co-located: recovered
    # the executor's plan (again after a 409 on the suspend write: it re-reads and re-plans)
    plans = [a for a in detail.actions
             if a.kind is RemediationActionKind.PLAN and a.payload.get("step") == "planned"]
    assert plans and all(a.payload["utilization_before"] == before for a in plans), plans
    verify = [a for a in detail.actions if a.kind is RemediationActionKind.VERIFY]
    assert verify[-1].succeeded is True
    assert verify[-1].payload["utilization_before"] == before
    assert verify[-1].payload["utilization_after"] == after
    assert ">= 80.0%" in (verify[-1].message or "")
