"""End to end on the twin: the finding's first Slack post already carries the plan preview.

The agent runs on the twin with the chat layer and the fake Slack (no approval is given here):
for `seed-blocked` and `lab`, the first `chat.postMessage` of the finding shows the fix in words,
the exact patch diff and the Approve button, and `zonemedic incidents show ID` prints the same
diff with its preconditions. With the target zone's nodes too full for the job's pods (CPU taken
by other pods, which the diagnosis's GPU count does not see) the preview is refused: the post
says the fix cannot be applied and why, with no Approve button, and the incident is not put up
for approval.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.chatops.blocks import ButtonAction
from agent.cli import main
from agent.fakes.slack import FakeSlack
from agent.model.lifecycle import EventKind, IncidentStatus, RemediationActionKind
from agent.settings import DiagnosisSettings, GroupSpec, Settings
from agent.sources.kubeapi import KubeApi
from tests.support.agent_rig import incident_of, running_agent
from tests.support.waiting import wait

LAB_GROUPS = [GroupSpec(
    name="llm-pretrain", namespace="ml-lab", selector={"app": "llm-pretrain"},
    coordinator={"role": "coordinator"}, workers={"role": "worker"}, ports=[29500],
)]  # fmt: skip


def first_post(slack: FakeSlack, job: str) -> dict[str, Any]:
    """The args of the finding's first chat.postMessage (not a thread reply, not an update)."""

    def found() -> dict[str, Any] | None:
        for call in slack.calls("chat.postMessage", ok_only=True):
            args = dict(call.args)
            if not args.get("thread_ts") and job in str(args.get("text")):
                return args
        return None

    posted: dict[str, Any] = wait(found, timeout=40, what=f"the first post of {job}")
    return posted


def blocks_of(args: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = args.get("blocks")
    return json.loads(blocks) if isinstance(blocks, str) else list(blocks or [])


def button_ids(blocks: list[dict[str, Any]]) -> list[str]:
    return [e["action_id"] for b in blocks if b["type"] == "actions" for e in b["elements"]]


def patch_text(blocks: list[dict[str, Any]]) -> str:
    found = [b["text"]["text"] for b in blocks
             if b["type"] == "section" and b["text"]["text"].startswith("*Patch:*")]  # fmt: skip
    assert len(found) == 1, blocks
    return str(found[0])


def incidents_show(capsys: pytest.CaptureFixture[str], settings: Settings, incident: int,
                   *, output: str = "table") -> str:  # fmt: skip
    capsys.readouterr()
    code = main(["incidents", "show", str(incident), "--database", settings.database.url,
                 "--output", output])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    return out


@pytest.mark.parametrize(
    ("scenario", "job", "diagnosis", "in_diff"),
    [
        ("seed-blocked", "llm-finetune", None,
         ["# PyTorchJob ml/llm-finetune: suspend, patch the templates, resume",
          "+++ PyTorchJob ml/llm-finetune Master (planned)",
          "+    topology.kubernetes.io/zone: us-east-1a", "+  tolerations:"]),
        ("lab", "llm-pretrain", DiagnosisSettings(groups=LAB_GROUPS),
         ["# Deployment ml-lab/", "patch the template (a rollout replaces its pods)",
          "+    topology.kubernetes.io/zone: zone-a"]),
    ],
)  # fmt: skip
def test_the_first_post_carries_the_diff_and_approve_and_incidents_show_prints_it(
    tmp_path: Path, slack: FakeSlack, capsys: pytest.CaptureFixture[str], scenario: str,
    job: str, diagnosis: DiagnosisSettings | None, in_diff: list[str],
) -> None:  # fmt: skip
    with running_agent(tmp_path, scenario, slack=slack, diagnosis=diagnosis,
                       leader_election=False) as rig:  # fmt: skip
        settings, store = rig.settings, rig.store
        args = first_post(slack, job)
        blocks = blocks_of(args)
        assert button_ids(blocks) == [a.value for a in ButtonAction], json.dumps(blocks)
        incident = incident_of(blocks)
        text = json.dumps(blocks)
        assert "*Proposed fix:* co-locate the job in zone" in text
        assert "Previewed before approval from" in text
        assert "*Waste:*" in text
        patch = patch_text(blocks)
        for piece in in_diff:
            assert piece in patch, (piece, patch)

        detail = store.get_incident(incident)
        previews = [a for a in detail.actions if a.kind is RemediationActionKind.PLAN]
        assert len(previews) == 1 and previews[0].payload["preview"] is True
        assert "step" not in previews[0].payload, "a preview is never the executor's plan"
        assert any(e.kind is EventKind.PLAN_PREVIEWED for e in detail.events)
        assert detail.incident.status is IncidentStatus.AWAITING_APPROVAL
        diff = previews[0].payload["plan"]["diff"]
        assert patch.split("```")[1] == diff.replace("```", "'''"), "the exact diff, whole"

        shown = incidents_show(capsys, settings, incident)
        assert "Proposed fix (preview, before approval):" in shown
        assert "Preconditions: uid" in shown and "Placement:" in shown
        for line in diff.splitlines():
            assert f"    {line}".rstrip() in shown.splitlines(), line
        as_json = json.loads(incidents_show(capsys, settings, incident, output="json"))
        assert as_json["proposed_fix"]["diff"] == diff
        assert as_json["proposed_fix"]["refusal"] is None
        assert as_json["proposed_fix"]["preconditions"]["verdict"] == detail.incident.verdict.value


def fill_zone_a_cpu(api: KubeApi) -> None:
    """Pods of another team take 39 of the 48 CPUs of both us-east-1a GPU nodes: the job's own
    workers (4 CPUs each) still run there, but a re-created job (4 workers and a 2-CPU master)
    no longer fits in the zone. They request no GPU, so the diagnosis still sees room."""
    for node in ("gpu-a-0", "gpu-a-1"):
        api.json("POST", "/api/v1/namespaces/ml/pods", body={
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"etl-{node}", "namespace": "ml", "labels": {"app": "etl"}},
            "spec": {"nodeName": node,
                     "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                      "effect": "NoSchedule"}],
                     "containers": [{"name": "etl", "image": "registry.example.com/etl:1",
                                     "resources": {"requests": {"cpu": "39", "memory": "8Gi"}}}]},
        })  # fmt: skip


def test_no_room_in_the_target_zone_the_post_says_why_and_offers_no_approve(
    tmp_path: Path, slack: FakeSlack, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_agent(tmp_path, "seed-blocked", slack=slack, before_agent=fill_zone_a_cpu,
                       leader_election=False) as rig:  # fmt: skip
        settings, store = rig.settings, rig.store
        args = first_post(slack, "llm-finetune")
        blocks = blocks_of(args)
        text = json.dumps(blocks)
        assert "The fix cannot be applied:* zone us-east-1a has no room" in text, text
        assert "*Patch:*" not in text
        ids = button_ids(blocks)
        assert ButtonAction.APPROVE.value not in ids
        assert ids == [ButtonAction.REJECT.value, ButtonAction.SNOOZE.value]
        assert "the fix cannot be applied" in str(args["text"])

        incident = incident_of(blocks)
        detail = store.get_incident(incident)
        assert detail.incident.status is IncidentStatus.OPEN, "nothing to approve"
        (preview,) = [a for a in detail.actions if a.kind is RemediationActionKind.PLAN]
        assert preview.succeeded is False and "no room" in preview.payload["refusal"]
        shown = incidents_show(capsys, settings, incident)
        assert "CANNOT BE APPLIED: zone us-east-1a has no room" in shown
