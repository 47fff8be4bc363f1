"""One incident per problem, on the twin with the whole agent and the fake Slack: a person edits
the split `seed-blocked` job by hand with kubectl (deletes a worker pod, relabels pods, labels the
job, suspends and resumes it) and the job keeps its one incident, whose re-detections fold into its
timeline, with one Slack post (edited, never posted again)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.fakes.slack import FakeSlack
from agent.model.incident import IncidentQuery, IncidentSummary
from agent.sources.jobkey import JobKey
from agent.twin.resources import lookup
from tests.support.agent_rig import RunningAgent, running_agent
from tests.support.waiting import wait

PODS = lookup("pods")
JOB = "llm-finetune"
ZONE_KEY = "netpol.example.com/zone"


class Edits:
    def __init__(self, rig: RunningAgent, slack: FakeSlack, home: Path) -> None:
        self.rig = rig
        self.slack = slack
        self.home = home

    def kubectl(self, *args: str) -> str:
        env = {**os.environ, "KUBECONFIG": str(self.rig.kubeconfig), "HOME": str(self.home),
               "KUBECACHEDIR": str(self.home / "cache")}
        done = subprocess.run(["kubectl", "-n", "ml", *args], env=env, capture_output=True,
                              text=True, timeout=30, check=False)
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done.stdout

    def incidents(self) -> list[IncidentSummary]:
        return self.rig.store.list_incidents(IncidentQuery(name=JOB, limit=50)).incidents

    def the_incident(self) -> IncidentSummary:
        incidents = self.incidents()
        assert len(incidents) == 1, [(i.id, i.verdict.value, i.status.value) for i in incidents]
        return incidents[0]

    def posts(self) -> list[Any]:
        return [c for c in self.slack.calls("chat.postMessage", ok_only=True)
                if not c.args.get("thread_ts")]

    def pods(self) -> list[dict[str, Any]]:
        items, _ = self.rig.cluster.store.list(PODS, namespace="ml")
        return [p for p in items if not (p.get("metadata") or {}).get("deletionTimestamp")]

    def bound(self) -> bool:
        pods = self.pods()
        return len(pods) == 5 and all((p.get("spec") or {}).get("nodeName") for p in pods)

    def handled(self) -> float:
        registry = self.rig.agent.metrics.registry
        return sum(registry.get_sample_value("zonemedic_detection_batches_total",
                                             {"outcome": o}) or 0.0
                   for o in ("ok", "retried", "error"))  # fmt: skip

    def gone_and_seen(self) -> None:
        """Wait until the job's pods are gone from the twin and the agent's cache, and a batch
        taken after that (so with the last deletion in it) is handled."""
        key = JobKey("PyTorchJob", "ml", JOB)
        wait(lambda: not self.rig.cluster.store.list(PODS, namespace="ml")[0]
             and not self.rig.agent.cache.pods_of_job(key), timeout=30, what="the pods gone")
        taken = self.rig.agent.detector.batches
        wait(lambda: self.rig.agent.detector.batches > taken
             and self.handled() >= self.rig.agent.detector.batches, timeout=30,
             what="a batch after the pods went, handled")

    def detected_more(self, than: int) -> IncidentSummary | None:
        incident = self.the_incident()
        return incident if incident.detections > than else None


@pytest.fixture
def edits(tmp_path: Path) -> Iterator[Edits]:
    with FakeSlack() as slack, running_agent(tmp_path, "seed-blocked", slack=slack) as rig:
        yield Edits(rig, slack, tmp_path)


def test_editing_one_job_by_hand_keeps_its_one_incident_and_one_post(edits: Edits) -> None:
    first = wait(lambda: next(iter(edits.incidents()), None), timeout=60, what="the incident")
    wait(edits.posts, timeout=30, what="the finding's post")
    assert first.verdict.value == "zone_split_blocked"

    # a worker pod deleted: the operator recreates it, the job is re-detected
    seen = edits.the_incident().detections
    old = edits.kubectl("get", "pod", f"{JOB}-worker-1", "-o", "jsonpath={.metadata.uid}")
    edits.kubectl("delete", "pod", f"{JOB}-worker-1", "--wait=false")
    wait(lambda: edits.bound() and all(p["metadata"]["uid"] != old for p in edits.pods()),
         timeout=30, what="the worker recreated and bound")
    wait(lambda: edits.detected_more(seen), timeout=30, what="the re-detection")

    # the coordinator's zone label changed by hand (the verdict changes), then put back
    edits.kubectl("label", "pod", f"{JOB}-master-0", f"{ZONE_KEY}=us-east-1a", "--overwrite")
    wait(lambda: edits.the_incident().verdict.value != "zone_split_blocked", timeout=30,
         what="the verdict after the relabel")
    edits.kubectl("label", "pod", f"{JOB}-master-0", f"{ZONE_KEY}=us-east-1b", "--overwrite")
    wait(lambda: edits.the_incident().verdict.value == "zone_split_blocked", timeout=30,
         what="the verdict back")
    # a label on the job object
    edits.kubectl("label", "pytorchjob", JOB, "team=research", "--overwrite")

    # suspended by hand (its pods go), then resumed (its pods come back, split again)
    seen = edits.the_incident().detections
    edits.kubectl("patch", "pytorchjob", JOB, "--type=merge", "-p",
                  '{"spec":{"runPolicy":{"suspend":true}}}')
    edits.gone_and_seen()
    assert edits.the_incident().status.value == "awaiting_approval"
    edits.kubectl("patch", "pytorchjob", JOB, "--type=merge", "-p",
                  '{"spec":{"runPolicy":{"suspend":false}}}')
    wait(edits.bound, timeout=30, what="the pods back")
    wait(lambda: edits.detected_more(seen), timeout=30, what="the resumed job re-detected")

    incident = edits.the_incident()
    assert (incident.id, incident.status.value, incident.verdict.value) == (
        first.id, "awaiting_approval", "zone_split_blocked")
    assert len(edits.posts()) == 1, [c.args.get("text") for c in edits.posts()]
    detail = edits.rig.store.get_incident(incident.id)
    verdicts = [e.detail.get("verdict") for e in detail.events if e.kind.value == "redetected"]
    assert "zone_split_blocked" in verdicts and len(set(verdicts)) >= 2
