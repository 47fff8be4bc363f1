"""End to end: the agent on the twin (`seed-blocked`) with the chat layer wired by `wire_chat`, the
fake Slack and a real Prometheus: the finding is posted with buttons and a chart, an approver's
click is recorded through the one decision function, the message is updated and the thread tells
it. (Executing the co-location after approval belongs to the remediation executor.)"""

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
from agent.runtime.app import Agent, Parts
from agent.runtime.chat import wire_chat
from agent.runtime.pipeline import AgentPipeline
from agent.settings import EnvironmentSecrets, SlackApprovers, SlackSettings
from agent.store.migrate import upgrade_on_start
from agent.twin import cluster as twin_cluster
from agent.twin import kubeconfig
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
