"""Kueue-managed PyTorchJobs on the twin's Kueue with the whole agent (the real Kubernetes client
watching the twin's API server over HTTPS as deploy/base's ServiceAccount, the fake Slack): each
packaged Kueue scenario's split job is diagnosed with the cause Kueue let it split for, the
incident's diagnosis carries the advice and the Kueue configuration to add. Where TAS is
configured the fix is zonemedic's (the Slack post shows the preview: re-placed through Kueue, its
annotations as a diff, Kueue re-queues the job, Approve offered); where it is not, the post shows
the configuration to add and offers no Approve button (nothing is written)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from agent.fakes.slack import FakeSlack
from agent.model.cluster import ZONE_LABEL
from agent.model.incident import IncidentQuery, IncidentSummary
from agent.model.workload import KUEUE
from tests.support.agent_rig import running_agent
from tests.support.waiting import wait

NAME = "llm-finetune"


@pytest.mark.parametrize(
    ("scenario", "cause", "kinds", "fixable"),
    [
        ("kueue", "no_topology_request", ["PyTorchJob patch"], True),
        ("kueue-wide-level", "wider_than_zone", ["PyTorchJob patch"], True),
        ("kueue-no-group", "ungrouped_pod_sets", ["PyTorchJob patch"], True),
        ("kueue-no-tas", "tas_not_configured", ["Topology", "ResourceFlavor", "PyTorchJob patch"],
         False),
    ],
)  # fmt: skip
def test_a_split_kueue_job_says_why_and_proposes_the_kueue_configuration(
    tmp_path: Path, scenario: str, cause: str, kinds: list[str], fixable: bool
) -> None:
    with FakeSlack(users={"U1": "alice"}) as slack, running_agent(
        tmp_path, scenario, slack=slack, rbac=True, leader_election=False
    ) as rig:
        def incident() -> IncidentSummary | None:
            found = rig.store.list_incidents(IncidentQuery(name=NAME, limit=5)).incidents
            return found[0] if found and found[0].verdict.value == "zone_split_degraded" else None

        opened = wait(incident, timeout=60, what=f"the split incident of {NAME}")
        diagnosis = rig.store.get_incident(opened.id).diagnosis
        advice = diagnosis["kueue"]
        assert (advice["cause"], advice["queue"], advice["cluster_queue"]) == (
            cause, "user-queue", "cluster-queue")
        assert str(advice["workload"]).startswith("pytorchjob-llm-finetune-")
        # fixable through Kueue (TAS configured: the job's own annotations) or not at all
        assert (diagnosis["remediable"], advice["agent_fixable"]) == (fixable, fixable)
        # the zone Kueue's zone-level placement must land in: the GPUs are only in us-east-1a
        assert (advice["zones"], advice["blocked"]) == (["us-east-1a"], None)
        docs = list(yaml.safe_load_all(advice["proposal"]))
        assert [d.get("kind", "PyTorchJob patch") for d in docs] == kinds
        patch = docs[-1]["spec"]["pytorchReplicaSpecs"]
        for replica in ("Master", "Worker"):
            annotations = patch[replica]["template"]["metadata"]["annotations"]
            assert annotations[KUEUE.topology_annotation] == ZONE_LABEL
            assert annotations[KUEUE.group_annotation] == NAME

        marker = "re-place the job through Kueue" if fixable else "Kueue configuration to add"

        def posted() -> str | None:
            for call in slack.calls("chat.postMessage", ok_only=True):
                text = json.dumps(call.args.get("blocks") or [])
                if NAME in text and marker in text:
                    return text
            return None

        post = wait(posted, timeout=30, what=f"the post of {NAME}")
        assert "re-queues the job" in post and KUEUE.group_annotation in post
        # approval only for the fix zonemedic applies itself (the preview's Kueue-native diff)
        assert ('"Approve"' in post) is fixable


@pytest.mark.parametrize(
    ("scenario", "name", "kind", "where"),
    [
        ("kueue-trainjob", "llm-pretrain", "TrainJob", "its own runtimePatches entry"),
        ("kueue-jobset", "pytorch-ddp", "JobSet", "its replicated jobs' pod templates"),
    ],
)  # fmt: skip
def test_a_split_kueue_trainjob_or_jobset_is_offered_the_fix_through_kueue(
    tmp_path: Path, scenario: str, name: str, kind: str, where: str
) -> None:
    """The Trainer family: the one PodSet carries no request; the advice is the job's own change
    (a TrainJob: zonemedic's runtimePatches entry; a JobSet: its replicated job's template), and
    the post shows the preview of the fix through Kueue with its diff and Approve."""
    with FakeSlack(users={"U1": "alice"}) as slack, running_agent(
        tmp_path, scenario, slack=slack, rbac=True, leader_election=False
    ) as rig:
        def incident() -> IncidentSummary | None:
            found = rig.store.list_incidents(IncidentQuery(name=name, limit=5)).incidents
            return found[0] if found and found[0].verdict.value == "zone_split_degraded" else None

        opened = wait(incident, timeout=60, what=f"the split incident of {name}")
        diagnosis = rig.store.get_incident(opened.id).diagnosis
        advice = diagnosis["kueue"]
        assert (advice["cause"], advice["agent_fixable"], diagnosis["remediable"]) == (
            "no_topology_request", True, True)
        assert str(advice["workload"]).startswith(f"{kind.lower()}-{name}-")
        (doc,) = list(yaml.safe_load_all(advice["proposal"]))
        if kind == "TrainJob":
            (entry,) = doc["spec"]["runtimePatches"]
            assert entry["manager"] == "zonemedic.io/remediation"
            rjobs = entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
        else:
            rjobs = doc["spec"]["replicatedJobs"]
        assert [r["name"] for r in rjobs] == ["node" if kind == "TrainJob" else "workers"]
        annotations = rjobs[0]["template"]["spec"]["template"]["metadata"]["annotations"]
        assert annotations[KUEUE.topology_annotation] == ZONE_LABEL
        assert KUEUE.group_annotation not in annotations  # one PodSet: nothing to group

        def posted() -> str | None:
            for call in slack.calls("chat.postMessage", ok_only=True):
                text = json.dumps(call.args.get("blocks") or [])
                if name in text and "re-place the job through Kueue" in text:
                    return text
            return None

        post = wait(posted, timeout=30, what=f"the post of {name}")
        assert "re-queues the job (it may wait for quota)" in post and where in post
        assert f"+    {KUEUE.topology_annotation}: {ZONE_LABEL}" in post  # the diff
        assert '"Approve"' in post
