"""Every refusal of the Kueue fix end to end on the twin's Kueue, with the real Kubernetes client as
deploy/base's ServiceAccount: an approved Kueue job whose fix cannot hold is refused with the
reason and nothing is written -- its ClusterQueue has no room for it, Kueue's Topology Aware
Scheduling is not configured, its Workload is not admitted, or it has no Workload; a job the
policies now block in every zone is no split the fix applies to (superseded, nothing written)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agent.model.incident import Actor, FindingRecord
from agent.model.job import JobRef
from agent.model.lifecycle import DecisionOutcome, DecisionSource, IncidentStatus
from agent.model.workload import KUEUE_WORKLOAD, JobKind
from agent.store.repository import IncidentStore
from agent.twin.faults import AuditEntry
from agent.twin.patch import PatchType
from agent.twin.resources import lookup
from tests.remediation.harness import migrated_template, new_store, running_lab

JOB = JobRef(JobKind.PYTORCH, "ml", "llm-finetune")
WORKLOADS = lookup("workloads", group="kueue.x-k8s.io")
CLUSTER_QUEUES = lookup("clusterqueues", group="kueue.x-k8s.io")
NETWORK_POLICIES = lookup("networkpolicies")
JOB_PATH = "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/llm-finetune"


def approve_split(lab: Any, store: IncidentStore, *, timeout: float = 45.0) -> int:
    """Record the job's split finding as it is (remediable or not) and approve it from the CLI."""
    deadline = time.monotonic() + timeout
    finding = None
    while time.monotonic() < deadline:
        finding = lab.diagnose(JOB).finding
        if finding is not None and finding.verdict.value == "zone_split_degraded":
            break
        time.sleep(0.05)
    assert finding is not None and finding.verdict.value == "zone_split_degraded", finding
    document = finding.to_dict()
    document["job"]["uid"] = lab.api.json("GET", JOB_PATH)["metadata"]["uid"]
    now = datetime.now(UTC)
    record = FindingRecord.from_finding(document, cluster="twin", detected_at=now, gpus=4)
    incident = store.record_finding(record).incident
    decided = store.record_decision(
        incident.id, DecisionOutcome.APPROVE, actor=Actor("alice", "alice", DecisionSource.CLI),
        now=now, expected=IncidentStatus.OPEN,
    )  # fmt: skip
    assert decided.applied
    return incident.id


def _workload(lab: Any) -> dict[str, Any]:
    (found,) = lab.cluster.store.list(WORKLOADS, namespace="ml")[0]
    return dict(found)


def deny_all_ingress(lab: Any) -> None:
    lab.cluster.store.create(NETWORK_POLICIES, {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "deny-all", "namespace": "ml"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}})  # fmt: skip


def squeeze_quota(lab: Any) -> None:
    lab.cluster.store.patch(CLUSTER_QUEUES, "cluster-queue", {"spec": {"resourceGroups": [{
        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
        "flavors": [{"name": "default-flavor", "resources": [
            {"name": "cpu", "nominalQuota": "200"}, {"name": "memory", "nominalQuota": "2Ti"},
            {"name": "nvidia.com/gpu", "nominalQuota": "2"}]}]}]}},
        patch_type=PatchType.MERGE)  # fmt: skip


def not_admitted(lab: Any) -> None:
    """Kueue stopped (so nothing reacts), the Workload's admission taken back."""
    assert lab.cluster.kueue is not None
    lab.cluster.kueue.stop()
    wl = _workload(lab)
    conditions = [{**c, "status": "False"} if c["type"] in ("Admitted", "QuotaReserved") else c
                  for c in wl["status"]["conditions"]]  # fmt: skip
    lab.cluster.store.patch(WORKLOADS, wl["metadata"]["name"],
                            {"status": {"conditions": conditions, "admission": None}},
                            namespace="ml", patch_type=PatchType.MERGE, subresource="status")  # fmt: skip


def no_workload(lab: Any) -> None:
    """Kueue stopped, the job's Workload gone."""
    assert lab.cluster.kueue is not None
    lab.cluster.kueue.stop()
    name = _workload(lab)["metadata"]["name"]
    lab.cluster.store.patch(WORKLOADS, name, {"metadata": {"finalizers": None}}, namespace="ml",
                            patch_type=PatchType.MERGE)  # fmt: skip
    lab.cluster.store.delete(WORKLOADS, name, namespace="ml")


def nothing(_lab: Any) -> None:
    return None


@pytest.mark.parametrize(
    ("scenario", "after_approval", "ends", "reason"),
    [
        # blocked in every zone: the job is policy_blocked now, not a split the fix applies to
        ("kueue", deny_all_ingress, IncidentStatus.SUPERSEDED, "the job is now policy_blocked"),
        ("kueue", squeeze_quota, IncidentStatus.REFUSED, "no room in ClusterQueue cluster-queue"),
        ("kueue-no-tas", nothing, IncidentStatus.REFUSED,
         "Topology Aware Scheduling is not configured"),
        ("kueue", not_admitted, IncidentStatus.REFUSED,
         "is not admitted: Kueue has not placed the job"),
        ("kueue", no_workload, IncidentStatus.REFUSED,
         "no Kueue Workload of PyTorchJob ml/llm-finetune found"),
    ],
    ids=["policies-block-every-zone", "no-room-in-cluster-queue", "tas-not-configured",
         "workload-not-admitted", "no-workload"],
)  # fmt: skip
def test_a_kueue_fix_that_cannot_hold_is_refused_and_nothing_is_written(
    tmp_path: Path, scenario: str, after_approval: Callable[[Any], None], ends: IncidentStatus,
    reason: str,
) -> None:
    store, _ = new_store(migrated_template(tmp_path), tmp_path)
    try:
        with running_lab(tmp_path, scenario, rbac=True) as lab:
            incident_id = approve_split(lab, store)
            before = lab.api.json("GET", JOB_PATH)
            after_approval(lab)
            status = lab.remediator(store).run(incident_id)
            detail = store.get_incident(incident_id)
            assert status is ends, [(e.kind, e.detail) for e in detail.events]
            assert reason in str(detail.events[-1].detail), detail.events[-1].detail
            assert lab.cluster.api is not None
            audited: list[AuditEntry] = list(lab.cluster.api.accounting.audited())
            written = [e for e in audited if e.user.startswith("system:serviceaccount:")
                       and e.verb in ("patch", "delete", "update", "create")
                       and e.resource in (KUEUE_WORKLOAD.plural, "pytorchjobs", "jobs")]  # fmt: skip
            assert written == []  # not even a dry run: refused at the plan
            after = lab.api.json("GET", JOB_PATH)
            assert after["spec"] == before["spec"]
    finally:
        store.close()
