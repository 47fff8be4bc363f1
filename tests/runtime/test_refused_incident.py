"""One incident per problem when the approved fix is refused, on the twin with the whole agent
(the real client, the remediation executor) and the fake Slack over HTTP: the split
`seed-blocked` job is Kueue-labelled, or in a protected namespace; an approver clicks Approve
anyway; the executor's guard refuses the fix with nothing written; the job, still split and
unchanged, is re-detected again and again. The job keeps its one incident, `refused` and open,
its re-detections folded into its timeline, with one top-level Slack post, edited to say why the
fix is not applied and what to do. Once the guard no longer holds (the Kueue label removed) the
problem is a new one: the refused incident is superseded and a new incident asks for approval."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

from agent.fakes.slack import FakeSlack
from agent.model.incident import IncidentQuery, IncidentSummary
from agent.model.job import JobRef
from agent.model.lifecycle import EventKind, IncidentStatus
from agent.model.workload import JobKind
from agent.settings import Settings
from agent.twin.resources import lookup
from tests.support.agent_rig import RunningAgent, approve_from_slack, running_agent
from tests.support.waiting import wait

PODS = lookup("pods")
JOB = "llm-finetune"
KEY = JobRef(JobKind.PYTORCH, "ml", JOB)
QUEUE = "kueue.x-k8s.io/queue-name"
REDETECTIONS = 3


class Job:
    """The split job as a person sees it: kubectl, the store's incidents, the channel's posts."""

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
        listing = self.rig.store.list_incidents(IncidentQuery(name=JOB, limit=50))
        return sorted(listing.incidents, key=lambda i: i.id)

    def detections(self) -> int:
        return sum(i.detections for i in self.incidents())

    def posts(self) -> list[Any]:
        return [c for c in self.slack.calls("chat.postMessage", ok_only=True)
                if not c.args.get("thread_ts")]

    def pods(self) -> list[dict[str, Any]]:
        items, _ = self.rig.cluster.store.list(PODS, namespace="ml")
        return [p for p in items if not (p.get("metadata") or {}).get("deletionTimestamp")]

    def redetect(self) -> None:
        """Delete a worker pod (the operator recreates it, split as before) and wait until the
        agent has diagnosed the job again."""
        seen = self.detections()
        old = self.kubectl("get", "pod", f"{JOB}-worker-1", "-o", "jsonpath={.metadata.uid}")
        self.kubectl("delete", "pod", f"{JOB}-worker-1", "--wait=false")
        wait(lambda: len(self.pods()) == 5
             and all((p.get("spec") or {}).get("nodeName") for p in self.pods())
             and all(p["metadata"]["uid"] != old for p in self.pods()),
             timeout=30, what="the worker recreated and bound")
        wait(lambda: self.detections() > seen, timeout=30, what="the job re-detected")

    def refused_then_redetected(self, *, why: str) -> IncidentSummary:
        """Approve from Slack, wait for the refusal, re-detect the unchanged job several times;
        the job's one incident."""
        _, incident_id = approve_from_slack(self.rig, self.slack, timeout=60)
        refused = wait(lambda: next((i for i in self.incidents() if i.id == incident_id
                                     and i.status is not IncidentStatus.APPROVED
                                     and i.status is not IncidentStatus.AWAITING_APPROVAL
                                     and i.status is not IncidentStatus.OPEN), None),
                       timeout=30, what="the approved fix refused")  # fmt: skip
        assert refused.status is IncidentStatus.REFUSED, refused.status
        for _ in range(REDETECTIONS):
            self.redetect()
        incidents = self.incidents()
        assert [(i.id, i.status) for i in incidents] == [(incident_id, IncidentStatus.REFUSED)]
        incident = incidents[0]
        assert incident.closed_at is None
        detail = self.rig.store.get_incident(incident.id)
        refusals = [e for e in detail.events if e.kind is EventKind.REFUSED]
        assert len(refusals) == 1 and why in refusals[0].detail["reason"], refusals
        # every re-detection counted on it, and on its timeline (folded: `last_at`, `repeats`)
        assert incident.detections >= refused.detections + REDETECTIONS
        last = max(str(e.detail.get("last_at") or e.at.isoformat()) for e in detail.events
                   if e.kind is EventKind.REDETECTED)
        assert last >= refusals[0].at.isoformat()
        assert len(self.posts()) == 1, [c.args.get("text") for c in self.posts()]
        # the one post, edited: why the fix is not applied and what to do instead
        edited = wait(lambda: next((c for c in reversed(self.slack.calls("chat.update",
                                                                          ok_only=True))
                                    if "Not fixed automatically" in str(c.args.get("blocks"))),
                                   None), timeout=30, what="the post edited with the refusal")
        assert "What to do" in str(edited.args.get("blocks"))
        assert not any(b.get("type") == "actions" for b in edited.args.get("blocks") or [])
        return incident


def test_a_kueue_labelled_split_refused_keeps_one_incident_and_one_post(tmp_path: Path) -> None:
    with FakeSlack() as slack, running_agent(tmp_path, "seed-blocked", slack=slack,
                                             executor=True) as rig:
        job = Job(rig, slack, tmp_path)
        wait(lambda: job.incidents() and job.posts(), timeout=60, what="the incident's post")
        job.kubectl("label", "pytorchjob", JOB, f"{QUEUE}=gpus")
        wait(lambda: ((rig.agent.cache.job_object(KEY) or {}).get("metadata") or {})
             .get("labels", {}).get(QUEUE) == "gpus", timeout=30, what="the label in the cache")
        first = job.refused_then_redetected(why="queued by Kueue")

        # the guard no longer holds: a new problem, a new incident that asks for approval
        job.kubectl("label", "pytorchjob", JOB, f"{QUEUE}-")
        job.redetect()
        incidents = wait(lambda: found if len(found := job.incidents()) == 2 else None,
                         timeout=30, what="a new incident once the label is gone")
        old, new = incidents
        assert (old.id, old.status) == (first.id, IncidentStatus.SUPERSEDED)
        assert new.status in (IncidentStatus.OPEN, IncidentStatus.AWAITING_APPROVAL)
        reason = rig.store.get_incident(old.id).events[-1].detail["reason"]
        assert "no longer holds" in reason
        wait(lambda: len(job.posts()) == 2, timeout=30, what="the new incident's post")


def test_a_protected_namespace_split_refused_keeps_one_incident_and_one_post(
    tmp_path: Path,
) -> None:
    def protect_ml(settings: Settings) -> Settings:
        protected = [*settings.diagnosis.protected_namespaces, "ml"]
        return replace(settings, diagnosis=replace(settings.diagnosis,
                                                   protected_namespaces=protected))

    with FakeSlack() as slack, running_agent(tmp_path, "seed-blocked", slack=slack,
                                             executor=True, settings_change=protect_ml) as rig:
        job = Job(rig, slack, tmp_path)
        wait(lambda: job.incidents() and job.posts(), timeout=60, what="the incident's post")
        job.refused_then_redetected(why="protected namespace ml")
