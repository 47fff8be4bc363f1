"""The plan preview (pure): a plan or a refusal becomes the `plan` action recorded before approval,
and reads back through `agent.model.proposal` as the proposed fix people are shown."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from agent.model.incident import RemediationAction
from agent.model.lifecycle import RemediationActionKind
from agent.model.proposal import from_action, latest_preview, proposed_fix
from agent.model.workload import JobKind
from agent.remediation.plan import Plan, Refusal
from agent.remediation.planner import plan_remediation
from agent.remediation.preview_action import describe, preview_action
from tests.remediation.builders import KINDS, cluster_nodes, finding, group_live, job, live
from tests.support.objects import ZONE

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
ZONES = {"zone-a": 2, "zone-b": 1}


def action(i: int, payload: dict[str, Any], *, message: str = "m",
           kind: RemediationActionKind = RemediationActionKind.PLAN,
           succeeded: bool | None = None) -> RemediationAction:  # fmt: skip
    return RemediationAction(id=i, incident_id=1, kind=kind, at=T0, actor="zonemedic",
                             succeeded=succeeded, payload=payload, message=message)  # fmt: skip


def kubeflow_result(kind: str, **kw: Any) -> Plan | Refusal:
    return plan_remediation(finding(KINDS[kind][4]), live(job(kind), **kw))


@pytest.mark.parametrize(
    ("case", "result", "words", "refused"),
    [
        ("pytorch planned", lambda: kubeflow_result("PyTorchJob"),
         ["co-locate the job in zone zone-a: suspend PyTorchJob ml/train",
          "the zone nodeSelector", "podAffinity to the job's own pods on the zone key",
          "tolerations for the zone's node taints", "then resume it", "pod(s) start in zone-a"],
         None),
        ("tfjob planned", lambda: kubeflow_result("TFJob"),
         ["suspend TFJob ml/train", "(Worker, Chief)"], None),
        ("no room: refused", lambda: kubeflow_result("PyTorchJob", nodes=cluster_nodes(cordon_a=True)),
         ["the fix cannot be applied: every node of zone zone-a is cordoned"],
         "every node of zone zone-a is cordoned"),
        ("kueue: refused", lambda: plan_remediation(
            finding(JobKind.PYTORCH), live(job("PyTorchJob", labels={"kueue.x-k8s.io/queue-name": "q"}))),
         ["the fix cannot be applied: Kueue-managed (queue q)"], "Kueue-managed (queue q)"),
    ],
)  # fmt: skip
def test_preview_action_records_the_plan_or_the_refusal(
    case: str, result: Any, words: list[str], refused: str | None
) -> None:
    found = result()
    recorded = preview_action(found, zones=ZONES, target_zone="zone-a")
    for piece in words:
        assert piece in recorded.message, (case, piece, recorded.message)
    assert recorded.payload["preview"] is True and recorded.payload["zones"] == ZONES
    assert recorded.payload["target_zone"] == "zone-a"
    fix = from_action(action(5, recorded.payload, message=recorded.message,
                             succeeded=recorded.succeeded))  # fmt: skip
    assert fix is not None and fix.preview and fix.zones == ZONES and fix.target_zone == "zone-a"
    if refused is None:
        assert isinstance(found, Plan) and recorded.succeeded is None
        assert recorded.payload["plan"] == found.to_dict(), "the whole plan, patches included"
        assert fix.applicable and fix.diff == found.diff and f"+    {ZONE}: zone-a" in fix.diff
        assert fix.preconditions["uid"] == "uid-train"
        assert fix.preconditions["resource_version"] == "41"
        assert fix.preconditions["placement"] == dict(found.preconditions.placement)
        assert fix.pods == found.pods
    else:
        assert isinstance(found, Refusal) and recorded.succeeded is False
        assert "plan" not in recorded.payload
        assert fix.refusal is not None and refused in fix.refusal and not fix.applicable
        assert fix.diff == ""


def test_group_preview_says_which_workloads_move_how() -> None:
    plan = plan_remediation(finding(JobKind.GROUP, name="lab"), group_live(), mirror_keys=("zone",))
    assert isinstance(plan, Plan), plan
    words = describe(plan)
    assert "patch the template of Deployment ml/coordinator with" in words
    assert "(a rollout moves its pods)" in words
    assert "recreate Job ml/workers-b with" in words and "the zone label" in words
    assert "workers-a" not in words, "workers already in zone-a stay"


@pytest.mark.parametrize(
    ("case", "actions", "want_fix", "want_preview"),
    [
        ("nothing recorded", [], None, None),
        ("other actions only", [action(1, {"step": "dry_run"}, kind=RemediationActionKind.DRY_RUN)],
         None, None),
        ("one preview", [action(1, {"preview": True, "plan": {"diff": "d1"}})], 1, 1),
        ("a newer preview wins", [action(1, {"preview": True, "plan": {"diff": "d1"}}),
                                  action(2, {"preview": True, "refusal": "no room"})], 2, 2),
        ("the executor's plan replaces the preview",
         [action(1, {"preview": True, "plan": {"diff": "d1"}}),
          action(3, {"step": "planned", "plan": {"diff": "d3"}})], 3, 1),
        ("a plan action without plan or refusal is skipped",
         [action(1, {"preview": True, "plan": {"diff": "d1"}}), action(2, {"step": "planned"})], 1, 1),
    ],
)  # fmt: skip
def test_proposed_fix_is_the_latest_plan(
    case: str, actions: list[RemediationAction], want_fix: int | None, want_preview: int | None
) -> None:
    fix = proposed_fix(list(reversed(actions)))
    preview = latest_preview(actions)
    assert (fix.action_id if fix else None) == want_fix, case
    assert (preview.action_id if preview else None) == want_preview, case


def test_the_plan_names_who_owns_each_target_and_the_preview_says_what_it_means() -> None:
    base = group_live()
    coordinator = next(w for w in base.workloads if w["metadata"]["name"] == "coordinator")
    coordinator["metadata"].setdefault("labels", {})["argocd.argoproj.io/instance"] = "lab"
    coordinator["metadata"]["managedFields"] = [
        {"manager": "argocd-controller", "operation": "Update", "time": "2026-11-30T11:00:00Z",
         "fieldsV1": {"f:spec": {"f:replicas": {}}}}]
    result = plan_remediation(finding(JobKind.GROUP, name="lab"), base, mirror_keys=("zone",))
    assert isinstance(result, Plan), result
    owners = {o.name: o.ownership for o in result.owners}
    assert set(owners) == {t.name for t in result.targets}
    assert owners["coordinator"].kind.value == "argocd"
    assert owners["coordinator"].managers == ("argocd-controller",)
    assert owners["workers-b"].durable
    assert Plan.from_dict(result.to_dict()).owners == result.owners
    recorded = preview_action(result, zones=ZONES, target_zone="zone-a")
    assert recorded.message.endswith(
        "Deployment ml/coordinator is managed by Argo CD application lab: this live fix lasts "
        "until its next sync unless the change is committed to the application's source")
    assert "workers-b is" not in recorded.message  # nothing re-applies it: not said
    fix = from_action(action(1, recorded.payload, message=recorded.message))
    assert fix is not None and not fix.lasting
    assert [o.name for o in fix.owners] == [o.name for o in result.owners]
    assert fix.to_dict()["owners"][0]["owner"]["kind"] in ("argocd", "none")
