"""The right verdict first, on the twin with the whole agent and the fake Slack: `seed-blocked`'s
zone label (the one its policies select on) is stamped on each pod by a binding hook some time
after the bind, before the pod starts. Job after job arrives while the agent watches; each
incident opens, and its one Slack post (the one with the Approve button) is first posted, on the
blocked verdict the policies give once the labels are there: never "training slowed" first and
an edit later. The jobs' pods bind one by one, so the labels of some are written before the gang
is complete and of others after: every interleaving of binds and label writes meets the rule."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agent.fakes.slack import FakeSlack
from agent.model.incident import IncidentQuery, IncidentSummary
from agent.model.lifecycle import EventKind
from agent.twin.resources import lookup
from tests.remediation.harness import quick
from tests.support.agent_rig import RunningAgent, running_agent
from tests.support.waiting import wait

PODS = lookup("pods")
PYTORCHJOBS = lookup("pytorchjobs")
RUNS = 5
LABEL_DELAY = 0.4  # seconds from a pod's bind to its zone label (and its start)


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[tuple[RunningAgent, FakeSlack, dict[str, Any]]]:
    scenario = quick("seed-blocked")
    (job,) = [o for o in scenario.objects if o.get("kind") == "PyTorchJob"]
    scenario = replace(scenario, objects=[o for o in scenario.objects if o is not job],
                       model=replace(scenario.model, pod_start_seconds=LABEL_DELAY))
    with FakeSlack() as slack, running_agent(tmp_path, scenario, slack=slack) as rig:
        yield rig, slack, job


def _first_post(slack: FakeSlack, incident_id: int) -> Any:
    """The first top-level post whose buttons carry the incident (as Slack received it)."""
    for call in slack.calls("chat.postMessage", ok_only=True):
        if call.args.get("thread_ts"):
            continue
        blocks = call.args.get("blocks")
        blocks = json.loads(blocks) if isinstance(blocks, str) else blocks or []
        for block in blocks:
            if block.get("type") == "actions" and any(
                    e.get("value") == str(incident_id) for e in block.get("elements", [])):
                return call, json.dumps(blocks)
    return None


def test_each_incident_is_first_posted_on_the_verdict_the_labels_give(
    watched: tuple[RunningAgent, FakeSlack, dict[str, Any]],
) -> None:
    rig, slack, template = watched
    for run in range(RUNS):
        name = f"llm-{run}"
        job = copy.deepcopy(template)
        job["metadata"]["name"] = name
        rig.cluster.apply(job)

        def incident(name: str = name) -> IncidentSummary | None:
            found = rig.store.list_incidents(IncidentQuery(name=name, limit=5)).incidents
            return found[0] if found else None

        opened = wait(incident, timeout=60, what=f"the incident of {name}")
        call, blocks = wait(lambda: _first_post(slack, opened.id), timeout=30,  # noqa: B023
                            what=f"the post of {name}")
        detail = rig.store.get_incident(opened.id)
        verdicts = [e.detail.get("verdict") for e in detail.events
                    if e.kind in (EventKind.DETECTED, EventKind.REDETECTED)]
        assert verdicts and set(verdicts) == {"zone_split_blocked"}, (name, verdicts)
        assert "Zone split, traffic blocked" in blocks and "training slowed" not in blocks, name
        assert "zone_split_degraded" not in blocks + str(call.args.get("text")), name
        # the next job has the zone to itself
        rig.cluster.store.delete(PYTORCHJOBS, name, namespace="ml")
        wait(lambda: not [p for p in rig.cluster.store.list(PODS, namespace="ml")[0]
                          if p["metadata"]["name"].startswith(f"{name}-")],  # noqa: B023
             timeout=30, what=f"the pods of {name} gone")
    assert len(rig.store.list_incidents(IncidentQuery(limit=50)).incidents) == RUNS
