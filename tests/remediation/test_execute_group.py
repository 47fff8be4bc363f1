"""The seed lab (a generic group: coordinator Deployment in zone-b, GPU worker Job in zone-a,
zone policies denying the traffic) resolved by moving the coordinator alone: its Deployment's
template pinned to zone-a with the GPU toleration and its `zone` label corrected, a rollout; the
GPU workers keep running untouched. A worker Job outside the zone is recreated; rollback restores
the Deployment and the Job."""

from __future__ import annotations

import urllib.request
from collections import Counter
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from agent.model.cluster import JobKind
from agent.model.job import JobRef
from agent.model.lifecycle import IncidentStatus, RemediationActionKind
from agent.remediation.execute import Step
from agent.remediation.plan import Plan, TargetAction
from agent.settings import DiagnosisSettings, GroupSpec
from tests.remediation.harness import (
    FAST,
    ZONE,
    Lab,
    approved_incident,
    migrated_template,
    new_store,
    running_lab,
)

NS = "ml-lab"
LAB = JobRef(JobKind.GROUP, NS, "llm-pretrain")
GROUPS = DiagnosisSettings(groups=[GroupSpec(
    name="llm-pretrain", namespace=NS, selector={"app": "llm-pretrain"},
    coordinator={"role": "coordinator"}, workers={"role": "worker"}, ports=[29500],
)])  # fmt: skip


def pods(lab: Lab) -> list[dict[str, Any]]:
    return [p for p in lab.api.json("GET", f"/api/v1/namespaces/{NS}/pods")["items"]
            if not p["metadata"].get("deletionTimestamp")]  # fmt: skip


def node_zones(lab: Lab) -> dict[str, str]:
    return {n["metadata"]["name"]: n["metadata"]["labels"][ZONE]
            for n in lab.api.json("GET", "/api/v1/nodes")["items"]}  # fmt: skip


def zones(lab: Lab) -> dict[str, str]:
    nodes = node_zones(lab)
    return {p["metadata"]["name"]: nodes[p["spec"]["nodeName"]] for p in pods(lab)}


def bound(lab: Lab) -> dict[str, int]:
    """Pods per zone, once every live pod of the namespace is bound (else empty)."""
    live = pods(lab)
    if not live or not all(p["spec"].get("nodeName") for p in live):
        return {}
    nodes = node_zones(lab)
    return dict(Counter(nodes[p["spec"]["nodeName"]] for p in live))


def gpu_utilization(lab: Lab) -> dict[str, float]:
    with urllib.request.urlopen(lab.cluster.metrics.url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {
        s.labels["pod"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "DCGM_FI_DEV_GPU_UTIL" and s.labels.get("namespace") == NS
    }


def test_lab_is_resolved_by_moving_the_coordinator_alone(tmp_path: Path) -> None:
    store, _ = new_store(migrated_template(tmp_path), tmp_path)
    with running_lab(tmp_path, "lab", diagnosis=GROUPS) as lab:
        incident_id = approved_incident(lab, store, ref=LAB)
        workers_before = {p["metadata"]["uid"] for p in pods(lab) if p["metadata"]["labels"]["role"] == "worker"}
        assert len(workers_before) == 4
        job_uid = lab.api.json("GET", f"/apis/batch/v1/namespaces/{NS}/jobs/llm-workers")["metadata"]["uid"]
        seen: list[Step] = []
        status = lab.remediator(store, on_step=seen.append).run(incident_id)
        detail = store.get_incident(incident_id)
        assert status is IncidentStatus.RESOLVED, [dict(e.detail) for e in detail.events]
        assert Step.ROLLED_OUT in seen and Step.JOB_DELETED not in seen
        plan = Plan.from_dict(next(a for a in detail.actions if a.kind is RemediationActionKind.PLAN).payload["plan"])
        assert [(t.action, t.name) for t in plan.targets] == [(TargetAction.ROLLOUT, "rendezvous")]
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
    store.close()


@pytest.mark.parametrize("rollback", [False, True])
def test_a_worker_job_outside_the_zone_is_recreated_and_rollback_restores_it(
    tmp_path: Path, rollback: bool
) -> None:
    store, _ = new_store(migrated_template(tmp_path), tmp_path)
    with running_lab(tmp_path, "lab", diagnosis=GROUPS) as lab:
        batch = client.BatchV1Api(lab.api.api_client)
        # the lab's own pods placed first: a worker of `llm-workers` (nodeSelector gpu=true, no
        # zone) still pending when the zone-b GPU node appears may land there, and the job then
        # has no single zone that allows every flow (its zone-a-labelled worker's egress)
        assert lab.cluster.wait_until(lambda: bound(lab) == {"zone-a": 4, "zone-b": 1}, timeout=60), bound(lab)
        # a second worker Job whose two pods land on zone-b (a GPU node added there)
        core = client.CoreV1Api(lab.api.api_client)
        core.create_node({"metadata": {"name": "gpu-b-0", "labels": {ZONE: "zone-b", "gpu": "true",
                                                                     "kubernetes.io/hostname": "gpu-b-0"}},
                          "status": {"allocatable": {"cpu": "48", "memory": "512Gi", "pods": "110",
                                                     "nvidia.com/gpu": "8"},
                                     "capacity": {"cpu": "48", "memory": "512Gi", "pods": "110",
                                                  "nvidia.com/gpu": "8"}}})  # fmt: skip
        batch.create_namespaced_job(NS, {
            "metadata": {"name": "llm-workers-b", "labels": {"app": "llm-pretrain"}},
            "spec": {"parallelism": 2, "completions": 2, "template": {
                "metadata": {"labels": {"app": "llm-pretrain", "role": "worker", "zone": "zone-b"}},
                "spec": {"restartPolicy": "OnFailure", "nodeSelector": {"gpu": "true", ZONE: "zone-b"},
                         "containers": [{"name": "main", "image": "registry.example.com/llm-pretrain:2.1",
                                         "resources": {"requests": {"cpu": "4", "memory": "16Gi",
                                                                    "nvidia.com/gpu": "1"},
                                                       "limits": {"nvidia.com/gpu": "1"}}}]}}},
        })  # fmt: skip
        assert lab.cluster.wait_until(lambda: bound(lab) == {"zone-a": 4, "zone-b": 3}, timeout=60), bound(lab)
        original = lab.api.json("GET", f"/apis/batch/v1/namespaces/{NS}/jobs/llm-workers-b")
        incident_id = approved_incident(lab, store, ref=LAB)

        def on_step(step: Step) -> None:
            if rollback and step is Step.JOB_DELETED:  # zone-a takes no new pod from now on
                for node in ("gpu-a-0", "gpu-a-1"):
                    core.patch_node(node, {"spec": {"unschedulable": True}},
                                    _content_type="application/merge-patch+json")  # fmt: skip

        settings = replace(FAST, schedule_timeout=timedelta(seconds=1.5))
        status = lab.remediator(store, settings=settings, on_step=on_step).run(incident_id)
        detail = store.get_incident(incident_id)
        plan = Plan.from_dict(next(a for a in detail.actions if a.kind is RemediationActionKind.PLAN).payload["plan"])
        assert {(t.action, t.name) for t in plan.targets} == {
            (TargetAction.ROLLOUT, "rendezvous"), (TargetAction.RECREATE, "llm-workers-b")}
        job = lab.api.json("GET", f"/apis/batch/v1/namespaces/{NS}/jobs/llm-workers-b")
        assert job["metadata"]["uid"] != original["metadata"]["uid"]  # recreated
        assert (job["spec"]["parallelism"], job["spec"]["completions"]) == (2, 2)
        assert job["metadata"]["labels"]["app"] == "llm-pretrain"
        template = job["spec"]["template"]
        deployment = lab.api.json("GET", f"/apis/apps/v1/namespaces/{NS}/deployments/rendezvous")
        if not rollback:
            assert status is IncidentStatus.RESOLVED, [dict(e.detail) for e in detail.events]
            assert template["metadata"]["labels"]["zone"] == "zone-a"
            assert template["spec"]["nodeSelector"][ZONE] == "zone-a"
            assert set(zones(lab).values()) == {"zone-a"}
        else:
            assert status is IncidentStatus.ROLLED_BACK, [dict(e.detail) for e in detail.events]
            assert template["metadata"]["labels"]["zone"] == "zone-b"
            assert template["spec"]["nodeSelector"] == original["spec"]["template"]["spec"]["nodeSelector"]
            assert deployment["spec"]["template"]["metadata"]["labels"]["zone"] == "zone-b"
            assert ZONE not in (deployment["spec"]["template"]["spec"].get("nodeSelector") or {})
    store.close()


def test_the_lab_label_put_back_by_a_sync_is_a_mislabel_and_relabelling_resolves_it(
    tmp_path: Path,
) -> None:
    """After the fix, a GitOps sync (or a re-run of `kubectl apply`) puts the template's
    `zone: zone-b` back: the coordinator stays in zone-a (pinned) with a lying label. The job is
    diagnosed `zone_label_mismatch` (not `policy_blocked`) and the approved fix relabels it."""
    from agent.model.verdict import Verdict

    store, _ = new_store(migrated_template(tmp_path), tmp_path)
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
        finding = lab.diagnose(LAB).finding
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
    store.close()
