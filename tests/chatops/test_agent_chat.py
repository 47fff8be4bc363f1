"""End to end: the agent on the twin (`seed-blocked`) with the chat layer wired by `wire_chat` and
the fake Slack. With a real Prometheus: the finding is posted with buttons and a chart, an
approver's click is recorded through the one decision function, the message is updated and the
thread tells it. With the leader's remediation executor: the approval leads to the co-location,
the incident ends resolved, and the thread tells each step."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.chatops.blocks import ButtonAction
from agent.chatops.slack import EVENTS_PATH
from agent.fakes.slack import FakeSlack
from agent.model.lifecycle import IncidentStatus
from tests.support.agent_rig import RunningAgent, approve_from_slack, incident_of, running_agent
from tests.support.prometheus import requires_prometheus
from tests.support.waiting import wait
from tests.twin import twin_fixtures

JOB = "llm-finetune"


@pytest.fixture
def agent_with_chat(tmp_path: Path, slack: FakeSlack) -> Iterator[RunningAgent]:
    with running_agent(tmp_path, twin_fixtures.fast("seed-blocked"), slack=slack,
                       prometheus=True, leader_election=False) as rig:  # fmt: skip
        yield rig


@requires_prometheus
def test_seed_blocked_posted_with_buttons_and_chart_then_approved(
    agent_with_chat: RunningAgent, slack: FakeSlack
) -> None:
    rig = agent_with_chat
    store = rig.store

    def parent() -> Any:
        for m in slack.messages():
            if m.thread_ts is None and JOB in m.text:
                return m
        return None

    message = wait(parent, timeout=40, what="the finding's post")
    actions = [e["action_id"] for b in message.blocks if b["type"] == "actions"
               for e in b["elements"]]
    assert actions == [a.value for a in ButtonAction]
    incident = incident_of(message.blocks)
    assert "Pods per zone" in json.dumps(message.blocks)

    answer = slack.click(rig.url + EVENTS_PATH, user="U1", action_id=ButtonAction.APPROVE.value,
                         value=str(incident), channel=message.channel)
    assert answer.status == 200
    wait(lambda: store.get_incident(incident).incident.status is not IncidentStatus.AWAITING_APPROVAL
         and store.get_incident(incident).decisions, timeout=40, what="the decision recorded")
    assert store.get_incident(incident).decisions[0].actor_id == "U1"
    wait(lambda: "Approved* by alice" in json.dumps(
        slack.message(message.channel, message.ts).blocks),
        timeout=40, what="the post updated with the approval")
    wait(lambda: any(m.thread_ts == message.ts and "Approved by alice" in m.text
                     for m in slack.messages()), timeout=40, what="the approval in the thread")
    # the chart, once Prometheus has samples of the job, lands in the same thread
    wait(lambda: slack.message(message.channel, message.ts).files, timeout=60, what="the chart")
    assert len([m for m in slack.messages() if m.thread_ts is None and JOB in m.text]) == 1


def test_approve_from_slack_leads_to_colocation_resolved_and_the_story_in_the_thread(
    tmp_path: Path, slack: FakeSlack
) -> None:
    with running_agent(tmp_path, "seed-blocked", slack=slack, executor=True,
                       leader_election=False) as rig:  # fmt: skip
        store = rig.store

        message, incident = approve_from_slack(rig, slack, timeout=40)
        wait(lambda: store.get_incident(incident).incident.status is IncidentStatus.RESOLVED,
             timeout=60, what="the incident resolved")

        def thread() -> list[str]:
            return [m.text for m in sorted(slack.messages(), key=lambda m: m.ts)
                    if m.thread_ts == message.ts]

        wait(lambda: any("Resolved" in t for t in thread()), timeout=40,
             what="'Resolved' in the thread")
        story = thread()
        expected = ["Approved by alice", "Remediation started", "Dry run passed",
                    "Job suspended", "Job resumed", "Pods co-located in zone", "Resolved"]
        positions = [next(i for i, t in enumerate(story) if e in t) for e in expected]
        assert positions == sorted(positions), story
        wait(lambda: "now *resolved*" in json.dumps(
            slack.message(message.channel, message.ts).blocks),  # type: ignore[union-attr]
            timeout=40, what="the post updated to resolved")
        final = slack.message(message.channel, message.ts)
        assert final is not None
        assert not [b for b in final.blocks if b["type"] == "actions"]
        assert "```" in json.dumps(final.blocks), "the plan's diff is shown once planned"
