"""End to end: the agent on the twin (`seed-blocked`) with the chat layer wired by `wire_chat` and
the fake Slack. With a real Prometheus: the finding is posted with buttons and a chart, an
approver's click is recorded through the one decision function, the message is updated and the
thread tells it. With the leader's remediation executor: the approval leads to the co-location,
the incident ends resolved, and the thread tells each step."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agent.chatops.fakeslack import FakeSlack
from agent.chatops.render import ButtonAction
from agent.chatops.slack import EVENTS_PATH
from agent.model.lifecycle import IncidentStatus
from agent.runtime import executor, expiry
from agent.runtime.app import Agent
from agent.runtime.chat import wire_chat
from agent.runtime.pipeline import AgentPipeline
from agent.runtime.root import Parts
from agent.settings import EnvironmentSecrets, SlackApprovers, SlackSettings
from agent.store.migrate import upgrade_on_start
from agent.twin import cluster as twin_cluster
from agent.twin import kubeconfig
from tests.remediation.harness import FAST, quick
from tests.runtime.test_agent_e2e import JOB, agent_settings
from tests.support.prometheus import requires_prometheus, running_prometheus
from tests.twin import twin_fixtures


def wait(check: Any, *, timeout: float = 40.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out")


@pytest.fixture
def agent_with_chat(tmp_path: Path, slack: FakeSlack) -> Iterator[tuple[Agent, Any]]:
    scenario = twin_fixtures.fast("seed-blocked")
    cluster = twin_cluster.TwinCluster(scenario)
    cluster.start()
    try:
        api = cluster.serve_api()
        path = kubeconfig.write(tmp_path / "kubeconfig", api.url)
        target = cluster.metrics.url.removeprefix("http://")
        with running_prometheus(tmp_path, scrape_targets=[target], scrape_interval="1s") as prom:
            settings = agent_settings(tmp_path, path, prom.url)
            settings = replace(
                settings,
                leader_election=replace(settings.leader_election, enabled=False),
                slack=SlackSettings(enabled=True, api_url=slack.base_url, channel="C0FAKE",
                                    approvers=SlackApprovers(users=["U1"]),
                                    deliver_every=timedelta(milliseconds=200)),
                secrets=EnvironmentSecrets(slack_bot_token=slack.bot_token,
                                           slack_signing_secret=slack.signing_secret),
            )
            store = upgrade_on_start(settings)

            def factory(parts: Parts) -> AgentPipeline:
                wire_chat(parts, store=store)
                return AgentPipeline(parts, store)

            agent = Agent(settings, pipeline_factory=factory)
            agent.start()
            try:
                yield agent, store
            finally:
                agent.stop()
                store.close()
    finally:
        cluster.stop()


@requires_prometheus
def test_seed_blocked_posted_with_buttons_and_chart_then_approved(
    agent_with_chat: tuple[Agent, Any], slack: FakeSlack
) -> None:
    agent, store = agent_with_chat

    def parent() -> Any:
        for m in slack.messages():
            if m.thread_ts is None and JOB in m.text:
                return m
        return None

    message = wait(parent)
    actions = [e["action_id"] for b in message.blocks if b["type"] == "actions"
               for e in b["elements"]]
    assert actions == [a.value for a in ButtonAction]
    incident = int(next(b for b in message.blocks if b["type"] == "actions")["elements"][0]["value"])
    assert "Pods per zone" in json.dumps(message.blocks)

    answer = slack.click(agent.url + EVENTS_PATH, user="U1", action_id=ButtonAction.APPROVE.value,
                         value=str(incident), channel=message.channel)
    assert answer.status == 200
    wait(lambda: store.get_incident(incident).incident.status is not IncidentStatus.AWAITING_APPROVAL
         and store.get_incident(incident).decisions)
    assert store.get_incident(incident).decisions[0].actor_id == "U1"
    wait(lambda: "Approved* by alice" in json.dumps(slack.message(message.channel, message.ts).blocks))
    wait(lambda: any(m.thread_ts == message.ts and "Approved by alice" in m.text
                     for m in slack.messages()))
    # the chart, once Prometheus has samples of the job, lands in the same thread
    wait(lambda: slack.message(message.channel, message.ts).files, timeout=60)
    assert len([m for m in slack.messages() if m.thread_ts is None and JOB in m.text]) == 1


def chat_settings(settings: Any, slack: FakeSlack) -> Any:
    return replace(
        settings,
        leader_election=replace(settings.leader_election, enabled=False),
        slack=SlackSettings(enabled=True, api_url=slack.base_url, channel="C0FAKE",
                            approvers=SlackApprovers(users=["U1"]),
                            deliver_every=timedelta(milliseconds=200)),
        secrets=EnvironmentSecrets(slack_bot_token=slack.bot_token,
                                   slack_signing_secret=slack.signing_secret),
    )


def test_approve_from_slack_leads_to_colocation_resolved_and_the_story_in_the_thread(
    tmp_path: Path, slack: FakeSlack
) -> None:
    cluster = twin_cluster.TwinCluster(quick("seed-blocked")).start()
    try:
        api = cluster.serve_api()
        path = kubeconfig.write(tmp_path / "kubeconfig", api.url)
        settings = chat_settings(agent_settings(tmp_path, path, None), slack)
        remediation = replace(settings.remediation, **{
            name: getattr(FAST, name) for name in (
                "suspend_timeout", "schedule_timeout", "verify_window", "poll_interval")})
        settings = replace(settings, remediation=remediation)
        store = upgrade_on_start(settings)

        def factory(parts: Parts) -> AgentPipeline:
            executor.register(parts, store, executor.live_remediator(parts, store))
            expiry.register(parts, store)
            wire_chat(parts, store=store)
            return AgentPipeline(parts, store)

        agent = Agent(settings, pipeline_factory=factory)
        agent.start()
        try:
            def parent() -> Any:
                for m in slack.messages():
                    if m.thread_ts is None and any(b["type"] == "actions" for b in m.blocks):
                        return m
                return None

            message = wait(parent)
            incident = int(next(b for b in message.blocks if b["type"] == "actions")
                           ["elements"][0]["value"])
            answer = slack.click(agent.url + EVENTS_PATH, user="U1",
                                 action_id=ButtonAction.APPROVE.value, value=str(incident),
                                 channel=message.channel)
            assert answer.status == 200
            wait(lambda: store.get_incident(incident).incident.status is IncidentStatus.RESOLVED,
                 timeout=60)

            def thread() -> list[str]:
                return [m.text for m in sorted(slack.messages(), key=lambda m: m.ts)
                        if m.thread_ts == message.ts]

            wait(lambda: any("Resolved" in t for t in thread()))
            story = thread()
            expected = ["Approved by alice", "Remediation started", "Dry run passed",
                        "Job suspended", "Job resumed", "Pods co-located in zone", "Resolved"]
            positions = [next(i for i, t in enumerate(story) if e in t) for e in expected]
            assert positions == sorted(positions), story
            wait(lambda: "now *resolved*" in json.dumps(
                slack.message(message.channel, message.ts).blocks))  # type: ignore[union-attr]
            final = slack.message(message.channel, message.ts)
            assert final is not None
            assert not [b for b in final.blocks if b["type"] == "actions"]
            assert "```" in json.dumps(final.blocks), "the plan's diff is shown once planned"
        finally:
            agent.stop()
            store.close()
    finally:
        cluster.stop()
