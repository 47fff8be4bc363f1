"""TrainJobs and JobSets on the twin with the whole agent (the real Kubernetes client watching
the twin's API server over HTTP, the fake Slack): each packaged scenario's gang is detected once
its pods are bound, diagnosed with the verdict and coordinator its kind's rules give, recorded
under its own kind (a TrainJob's pods belong to the TrainJob, never to its JobSet) and posted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.fakes.slack import FakeSlack
from agent.model.incident import IncidentQuery, IncidentSummary
from agent.model.lifecycle import EventKind
from agent.model.workload import JobKind
from tests.support.agent_rig import running_agent
from tests.support.waiting import wait


@pytest.mark.parametrize(
    ("scenario", "kind", "name", "verdict", "coordinator", "zones"),
    [
        # torch: rank 0 is the `node` pod of Job 0, completion index 0; four GPU nodes, two per zone
        ("trainjob", JobKind.TRAINJOB, "llm-pretrain", "zone_split_degraded", "llm-pretrain-node-0-0-",
         {"us-east-1a": 2, "us-east-1b": 2}),
        # MPI: the CPU-only launcher, away from its four GPU nodes; the zone policies deny its ssh
        ("trainjob-mpi", JobKind.TRAINJOB, "mpi-pretrain", "zone_split_blocked",
         "mpi-pretrain-launcher-0-0-", {"us-east-1a": 4, "us-east-1b": 1}),
        # a JobSet on its own: spec.coordinator names rank 0
        ("jobset", JobKind.JOBSET, "pytorch-ddp", "zone_split_degraded", "pytorch-ddp-workers-0-0-",
         {"us-east-1a": 2, "us-east-1b": 2}),
    ],
)
def test_the_gang_is_detected_and_diagnosed_under_its_kind(
    tmp_path: Path, scenario: str, kind: JobKind, name: str, verdict: str, coordinator: str,
    zones: dict[str, int],
) -> None:
    with FakeSlack() as slack, running_agent(tmp_path, scenario, slack=slack) as rig:
        def incident() -> IncidentSummary | None:
            found = rig.store.list_incidents(IncidentQuery(name=name, limit=5)).incidents
            return found[0] if found and found[0].verdict.value == verdict else None

        opened = wait(incident, timeout=60, what=f"the {verdict} incident of {name}")
        assert (opened.kind, opened.namespace, opened.name) == (kind.value, "ml", name)
        detail = rig.store.get_incident(opened.id)
        # the first verdict is the right one (trainjob-mpi's zone label comes after the bind)
        verdicts = {e.detail.get("verdict") for e in detail.events
                    if e.kind in (EventKind.DETECTED, EventKind.REDETECTED)}
        assert verdicts == {verdict}
        diagnosis = detail.diagnosis
        assert str(diagnosis["coordinator"]["pod"]).startswith(coordinator), diagnosis["coordinator"]
        assert diagnosis["zones"] == zones
        # nothing of the JobSet a TrainJob owns is an incident of its own
        kinds = {i.kind for i in rig.store.list_incidents(IncidentQuery(limit=50)).incidents}
        assert kinds == {kind.value}

        def posted() -> str | None:
            for call in slack.calls("chat.postMessage", ok_only=True):
                blocks = call.args.get("blocks")
                text = blocks if isinstance(blocks, str) else json.dumps(blocks or [])
                if name in text:
                    return text
            return None

        post = wait(posted, timeout=30, what=f"the post of {name}")
        assert kind.value in post and coordinator in post
