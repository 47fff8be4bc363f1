"""Revert detection against the twin: zonemedic's fix is applied through the official client as
`zonemedic`, the owner's manifest is applied again with kubectl (a CI job or a GitOps sync), and
the detection names what came back and the field manager that wrote it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from agent.approval.step import ApprovalStepKind, Remediability, approval_step
from agent.model.document import IncidentDocument, UtilizationEvidence
from agent.model.incident import FindingRecord, RemediationAction
from agent.model.job import JobRef
from agent.model.lifecycle import IncidentStatus, RemediationActionKind
from agent.model.proposal import from_action
from agent.model.revert import Revert
from agent.model.workload import JobKind
from agent.playbook.model import ApprovalPolicy
from agent.remediation.plan import LiveObjects, Plan, Target, TargetAction
from agent.remediation.planner import plan_remediation
from agent.remediation.preview_action import preview_action
from agent.remediation.revert import find_revert
from agent.remediation.writer import FIELD_MANAGER, MERGE_PATCH
from agent.runtime.plan_previews import PlanPreviews
from agent.sources.kubeapi import KubeApi
from agent.store.repository import IncidentStore
from agent.twin.resources import lookup
from tests.remediation.builders import finding, group_live
from tests.twin.apiserver_harness import Twin, running_twin

DEPLOYMENTS = lookup("deployments", group="apps")


@pytest.fixture
def twin(tmp_path: Path) -> Iterator[Twin]:
    with running_twin(tmp_path) as t:
        t.kubectl("create", "namespace", "ml")
        yield t


def coordinator_plan() -> tuple[Plan, dict[str, Any]]:
    """The lab group's plan and the coordinator Deployment's manifest it was planned from."""
    live = group_live()
    plan = plan_remediation(finding(JobKind.GROUP, name="lab"), live, mirror_keys=("zone",))
    assert isinstance(plan, Plan), plan
    manifest = next(w for w in live.workloads if w["metadata"]["name"] == "coordinator")
    manifest = {k: v for k, v in manifest.items() if k != "status"}
    manifest["metadata"] = {k: v for k, v in manifest["metadata"].items()
                            if k in ("name", "namespace", "labels")}
    return plan, manifest


def lookup_in(twin: Twin) -> Any:
    def live(target: Target) -> dict[str, Any] | None:
        if target.kind != "Deployment":
            return None
        return twin.store.get(DEPLOYMENTS, target.name, namespace=target.namespace)
    return live


def test_a_reapplied_manifest_restores_the_label_and_is_named_with_its_manager(twin: Twin) -> None:
    plan, manifest = coordinator_plan()
    twin.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(manifest))
    (target,) = [t for t in plan.targets if t.kind == "Deployment"]
    assert target.action is TargetAction.ROLLOUT
    with config.new_client_from_config(config_file=str(twin.kubeconfig)) as api:
        client.AppsV1Api(api).patch_namespaced_deployment(
            target.name, target.namespace, target.template_patch(), field_manager=FIELD_MANAGER,
            _content_type=MERGE_PATCH)
    assert find_revert(plan, lookup_in(twin), incident_id=12) is None, "the fix holds"

    twin.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(manifest))  # the owner's next sync
    revert = find_revert(plan, lookup_in(twin), incident_id=12)
    assert revert is not None
    by_field = {f.field: f for f in revert.fields}
    label = by_field["spec.template.metadata.labels.zone"]
    assert (label.planned, label.now, label.manager) == ("zone-a", "zone-b",
                                                         "kubectl-client-side-apply")
    assert "spec.template.spec.nodeSelector.topology.kubernetes.io/zone" not in by_field, \
        "the pin is not in the manifest: a client-side apply keeps it (half the fix undone)"
    assert revert.title() == "fix reverted by kubectl-client-side-apply"
    assert revert.at and revert.at == label.at
    assert Revert.from_dict(json.loads(json.dumps(revert.to_dict()))) == revert

    # the next preview names it, and an automatic approval is held
    recorded = preview_action(plan, zones={"zone-a": 2, "zone-b": 1}, target_zone="zone-a",
                              reverted=revert)
    assert recorded.message.startswith("fix reverted by kubectl-client-side-apply at ")
    assert "commit the change to the object's source" in recorded.message
    action = RemediationAction(id=1, incident_id=13, kind=RemediationActionKind.PLAN,
                               at=datetime(2026, 12, 3, tzinfo=UTC), actor="zonemedic",
                               succeeded=None, payload=recorded.payload, message=recorded.message)
    fix = from_action(action)
    assert fix is not None and fix.reverted == revert
    now = datetime.fromisoformat(revert.at)
    split = finding(JobKind.GROUP, name="lab")
    document = IncidentDocument.of_finding(split, uid=None, metrics=UtilizationEvidence("none"))
    subject = Remediability.of(document.with_fix({"refusal": None,
                                                  "reverted": revert.to_dict()}))
    assert subject.reverted is not None and subject.reverted.at == now
    step = approval_step(
        namespace="ml", subject=subject,
        policy=ApprovalPolicy(auto_namespaces=("ml",)), protected_namespaces=(),
        default_ttl=timedelta(hours=1), now=now,
        auto_hold=timedelta(hours=24))
    assert step.kind is ApprovalStepKind.REQUEST
    assert "fix reverted by kubectl-client-side-apply" in step.reason


def test_a_server_side_sync_restoring_the_pin_names_its_manager(twin: Twin) -> None:
    plan, manifest = coordinator_plan()
    pinned = json.loads(json.dumps(manifest))
    pinned["spec"]["template"]["spec"]["nodeSelector"] = {"topology.kubernetes.io/zone": "zone-b"}
    twin.kubectl("apply", "--server-side", "--field-manager=argocd-controller", "-f", "-",
                 stdin=yaml.safe_dump(pinned))
    (target,) = [t for t in plan.targets if t.kind == "Deployment"]
    with config.new_client_from_config(config_file=str(twin.kubeconfig)) as api:
        client.AppsV1Api(api).patch_namespaced_deployment(
            target.name, target.namespace, target.template_patch(), field_manager=FIELD_MANAGER,
            _content_type=MERGE_PATCH)
    twin.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=argocd-controller",
                 "-f", "-", stdin=yaml.safe_dump(pinned))
    revert = find_revert(plan, lookup_in(twin), incident_id=3)
    assert revert is not None and revert.manager == "argocd-controller"
    fields = {f.field for f in revert.fields}
    assert "spec.template.spec.nodeSelector.topology.kubernetes.io/zone" in fields


def test_the_preview_of_the_next_split_compares_the_last_executed_plan(
    twin: Twin, store: IncidentStore
) -> None:
    """Over the real store: the job's resolved incident with the plan zonemedic executed; the
    previews read it back and find the label the sync restored."""
    plan, manifest = coordinator_plan()
    twin.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(manifest))
    (target,) = [t for t in plan.targets if t.kind == "Deployment"]
    with config.new_client_from_config(config_file=str(twin.kubeconfig)) as api:
        client.AppsV1Api(api).patch_namespaced_deployment(
            target.name, target.namespace, target.template_patch(), field_manager=FIELD_MANAGER,
            _content_type=MERGE_PATCH)
    t0 = datetime(2026, 12, 3, 10, tzinfo=UTC)
    split = finding(JobKind.GROUP, name="lab")
    doc = {**split.to_dict(), "job": {"kind": "Group", "namespace": "ml", "name": "lab"}}
    fixed = store.record_finding(FindingRecord.from_finding(doc, cluster="prod",
                                                            detected_at=t0)).incident
    store.record_action(fixed.id, RemediationActionKind.PLAN, now=t0, actor="zonemedic",
                        payload={"plan": plan.to_dict(), "step": "planned"}, message="planned")
    store.transition(fixed.id, IncidentStatus.OPEN, IncidentStatus.RESOLVED, actor="zonemedic",
                     now=t0 + timedelta(minutes=5))
    previews = PlanPreviews(KubeApi(None), store, now=lambda: t0, cluster="prod")
    deployment = twin.store.get(DEPLOYMENTS, "coordinator", namespace="ml")
    live = LiveObjects(job=None, pods=(), nodes=(), bound_pods=(), workloads=(deployment,))
    ref = JobRef(JobKind.GROUP, "ml", "lab")
    assert previews.revert(ref, live) is None, "the fix still holds"

    twin.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(manifest))
    deployment = twin.store.get(DEPLOYMENTS, "coordinator", namespace="ml")
    live = LiveObjects(job=None, pods=(), nodes=(), bound_pods=(), workloads=(deployment,))
    revert = previews.revert(ref, live)
    assert revert is not None and revert.incident_id == fixed.id
    assert revert.manager == "kubectl-client-side-apply"
    assert previews.revert(JobRef(JobKind.GROUP, "ml", "other"), live) is None
