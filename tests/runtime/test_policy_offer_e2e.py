"""End to end on the twin: a job the policies block in every zone gets the policy-side fix.

The agent runs on the twin (`seed-blocked`, plus a policy that lets the workers send only to the
ETL app: no zone can help) with the chat layer and the fake Slack. The finding stored with the
incident carries the proposed CiliumNetworkPolicy (YAML, diff, the command to apply it, its
what-if blast radius: exactly the job's denied flows), and it reads the same from `zonemedic
incidents show ID --output json` and `GET /api/incidents/{id}`; the Slack post offers it as the
alternative, says zonemedic does not apply policies, and offers no Approve button. Nothing is
applied: the twin holds no policy of zonemedic's afterwards."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import yaml

from agent.cli import main
from agent.fakes.slack import FakeSlack
from agent.model.incident import IncidentQuery, IncidentSummary
from agent.sources.kubeapi import KubeApi
from agent.twin.resources import lookup
from tests.support.agent_rig import running_agent
from tests.support.waiting import wait

NAME = "llm-finetune"
FIX = f"zonemedic-allow-{NAME}"
CNPS = lookup("ciliumnetworkpolicies")


def lock_the_workers(api: KubeApi) -> None:
    """The workers may send only to the ETL app: their traffic to the master and to each other is
    denied at egress, in whichever zone the job runs."""
    api.json("POST", "/apis/cilium.io/v2/namespaces/ml/ciliumnetworkpolicies", body={
        "apiVersion": "cilium.io/v2", "kind": "CiliumNetworkPolicy",
        "metadata": {"name": "workers-to-etl-only", "namespace": "ml"},
        "spec": {"endpointSelector": {"matchLabels": {"training.kubeflow.org/replica-type": "worker"}},
                 "egress": [{"toEndpoints": [{"matchLabels": {"app": "etl"}}]}]},
    })  # fmt: skip


def test_a_policy_blocked_job_is_offered_the_policy_fix_everywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeSlack(users={"U1": "alice"}) as slack, running_agent(
        tmp_path, "seed-blocked", slack=slack, before_agent=lock_the_workers, leader_election=False
    ) as rig:
        def incident() -> IncidentSummary | None:
            found = rig.store.list_incidents(IncidentQuery(name=NAME, limit=5)).incidents
            return found[0] if found and found[0].verdict.value == "policy_blocked" else None

        opened = wait(incident, timeout=60, what=f"the policy-blocked incident of {NAME}")
        stored = rig.store.get_incident(opened.id).diagnosis
        offer = stored["policy_fix"]
        assert offer["kind"] == "CiliumNetworkPolicy" and offer["names"] == [FIX]
        assert offer["apply"] == f"kubectl apply -f {FIX}.yaml"
        assert "zonemedic does not apply network policies" in offer["note"]
        assert "security team" in offer["note"]
        assert offer["exact"] is True
        radius = offer["blast_radius"]
        assert radius["required_flows_changed"] == radius["denied_required_flows"] == offer["opened_flows"]
        assert offer["opened_flows"] == stored["denied_flows_total"] > 0
        assert radius["touched_outside_job"] == [] and radius["other_flows_changed"] == 0
        (manifest,) = yaml.safe_load_all(offer["yaml"])
        assert manifest["metadata"] == {"name": FIX, "namespace": "ml"}
        blocks = manifest.get("specs") or [manifest["spec"]]
        for block in blocks:  # every selector names the job's own pods
            assert block["endpointSelector"]["matchLabels"]["training.kubeflow.org/job-name"] == NAME
            assert block["enableDefaultDeny"] == {"ingress": False, "egress": False}
            for rule in block.get("ingress", []) + block.get("egress", []):
                for peer in rule.get("fromEndpoints", []) + rule.get("toEndpoints", []):
                    assert peer["matchLabels"]["training.kubeflow.org/job-name"] == NAME
        # the workers' egress is opened (every denying hop), at the workers only
        assert any("egress" in b and b["endpointSelector"]["matchLabels"].get(
            "training.kubeflow.org/replica-type") == "worker" for b in blocks)
        assert offer["diff"].startswith(f"--- /dev/null\n+++ {FIX}.yaml\n")

        # the same from the CLI and the HTTP API
        capsys.readouterr()
        code = main(["incidents", "show", str(opened.id), "--database", rig.settings.database.url,
                     "--output", "json"])  # fmt: skip
        shown = capsys.readouterr().out
        assert code == 0, shown
        assert json.loads(shown)["diagnosis"]["policy_fix"] == offer
        with httpx.Client(base_url=rig.url, timeout=10) as http:
            detail = http.get(f"/api/incidents/{opened.id}")
        assert detail.status_code == 200, detail.text
        assert detail.json()["diagnosis"]["policy_fix"] == offer

        def posted() -> str | None:
            for call in slack.calls("chat.postMessage", ok_only=True):
                text = json.dumps(call.args.get("blocks") or [])
                if NAME in text and "Alternative: a policy change" in text:
                    return text
            return None

        post = wait(posted, timeout=30, what=f"the post of {NAME} with the policy fix")
        assert f"kubectl apply -f {FIX}.yaml" in post
        assert "zonemedic does not apply network policies" in post
        assert "no other flow changes" in post and "*Policy to add:*" in post
        assert f"+++ {FIX}.yaml" in post
        assert '"Approve"' not in post  # nothing zonemedic applies itself
        policies = rig.cluster.store.list(CNPS, namespace="ml")[0]
        assert FIX not in [p["metadata"]["name"] for p in policies]
