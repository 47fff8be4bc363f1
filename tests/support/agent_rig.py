"""A whole zonemedic agent running in-process on the twin, for end-to-end tests.

Who calls it: the end-to-end tests that start one real `Agent` (watches, detector, playbooks,
HTTP API; optionally the chat layer, the remediation executor and a real Prometheus) against the
twin over HTTP. `running_agent(tmp_path, scenario, ...)` starts the twin for the scenario (a
packaged scenario's name is loaded with fast pods, `quick`), serves its API (with no
authentication, or with `rbac` as deploy/base's ServiceAccount with exactly its RBAC, the Lease
then in the deploy namespace), optionally runs a real Prometheus scraping the twin's exporter,
builds the settings (`agent_settings`), wires the chat layer to a fake Slack when one is given,
registers the remediation executor (fast remediation timings) and the approval expiry when asked,
starts the agent and yields a `RunningAgent`; on exit it stops everything in reverse order.
`approve_from_slack` is the approver's side of the chat: it waits for the finding's post with
buttons and clicks Approve on it; `incident_of` reads the incident a post's buttons carry.

What it does not do: run more than one agent (tests of several replicas build theirs), wait for
the agent to be ready or to lead (each test waits on the conditions it tests), or open the
database some other way than the agent's own start-up migration.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from agent.approval import expiry
from agent.chatops.blocks import ButtonAction
from agent.chatops.slack import EVENTS_PATH
from agent.fakes.slack import FakeSlack
from agent.runtime.app import Agent
from agent.runtime.chat import wire_chat
from agent.runtime.pipeline import AgentPipeline
from agent.runtime.remediation_queue import live_remediator
from agent.runtime.remediation_queue import register as register_executor
from agent.runtime.root import Parts
from agent.settings import (
    DiagnosisSettings,
    EnvironmentSecrets,
    KubernetesSettings,
    Settings,
    SlackApprovers,
    SlackSettings,
    load_settings,
)
from agent.sources.kubeapi import KubeApi, build_api_client
from agent.store.migrate import upgrade_on_start
from agent.store.repository import IncidentStore
from agent.twin import kubeconfig
from agent.twin.access import Access
from agent.twin.cluster import TwinCluster
from agent.twin.scenario import Scenario
from tests.remediation.harness import FAST, deploy_namespace, deploy_rbac, quick
from tests.support.prometheus import PrometheusServer, running_prometheus
from tests.support.waiting import wait

REPO = Path(__file__).resolve().parents[2]
CHANNEL = "C0FAKE"
APPROVER = "U1"  # the one Slack user allowed to approve
FAST_REMEDIATION = ("suspend_timeout", "schedule_timeout", "verify_window", "poll_interval")


def agent_settings(tmp_path: Path, kubeconfig_path: Path, prometheus_url: str | None) -> Settings:
    """The agent's settings for a test on the twin: the shipped playbooks, SQLite in `tmp_path`,
    HTTP on a free loopback port, a short leader lease in `default`, Prometheus (when given) with
    a short timeout, no retry and a 20 s drop window, metrics refreshed every second."""
    settings = load_settings(None, {})
    return replace(
        settings,
        cluster_name="twin",
        data_dir=str(tmp_path),
        playbooks_dir=str(REPO / "playbooks"),
        kubernetes=replace(settings.kubernetes, kubeconfig=str(kubeconfig_path)),
        database=replace(settings.database, url=f"sqlite:///{tmp_path / 'zonemedic.db'}"),
        http=replace(settings.http, host="127.0.0.1", port=0),
        leader_election=replace(
            settings.leader_election,
            namespace="default",
            lease_duration=timedelta(seconds=3),
            renew_deadline=timedelta(seconds=2),
            retry_period=timedelta(milliseconds=500),
        ),
        prometheus=replace(
            settings.prometheus,
            url=prometheus_url,
            timeout=timedelta(seconds=3),
            retries=0,
            drop_duration=timedelta(seconds=20),
            baseline_offset=timedelta(minutes=5),
        ),
        detection=replace(settings.detection, metrics_interval=timedelta(seconds=1)),
    )


def with_slack(settings: Settings, slack: FakeSlack) -> Settings:
    """Slack on through the fake Slack: channel `CHANNEL`, `APPROVER` the only approver, the
    outbox delivered every 200 ms."""
    return replace(
        settings,
        slack=SlackSettings(enabled=True, api_url=slack.base_url, channel=CHANNEL,
                            approvers=SlackApprovers(users=[APPROVER]),
                            deliver_every=timedelta(milliseconds=200)),
        secrets=EnvironmentSecrets(slack_bot_token=slack.bot_token,
                                   slack_signing_secret=slack.signing_secret),
    )  # fmt: skip


@dataclass(frozen=True)
class RunningAgent:
    """The parts of one running agent rig."""

    cluster: TwinCluster
    agent: Agent
    store: IncidentStore  # the agent's database, as its start-up migration opened it
    settings: Settings
    kubeconfig: Path  # the agent's (the ServiceAccount's with `rbac`)
    access: Access | None  # with `rbac`: the API server and the ServiceAccount's tokens
    prometheus: PrometheusServer | None

    @property
    def url(self) -> str:
        """The agent's HTTP server."""
        return self.agent.url

    @property
    def user(self) -> str | None:
        """With `rbac`: the ServiceAccount's user name, as the twin's audit records it."""
        return self.access.user.name if self.access is not None else None

    @property
    def prometheus_url(self) -> str | None:
        return self.prometheus.url if self.prometheus is not None else None


@contextmanager
def running_agent(
    tmp_path: Path, scenario: str | Scenario, *, slack: FakeSlack | None = None,
    prometheus: bool = False, rbac: bool = False, executor: bool = False,
    diagnosis: DiagnosisSettings | None = None,
    before_agent: Callable[[KubeApi], None] | None = None,
    settings_change: Callable[[Settings], Settings] | None = None,
    identity: str | None = None, leader_election: bool = True,
    before_start: Callable[[Agent], None] | None = None,
    pipeline_class: type[AgentPipeline] = AgentPipeline,
) -> Iterator[RunningAgent]:  # fmt: skip
    """One agent on the twin serving `scenario` (a packaged scenario's name is loaded `quick`).

    `slack`: the chat layer wired to that fake Slack. `prometheus`: a real Prometheus scraping the
    twin's exporter every second, the agent's metrics source. `rbac`: the API served over TLS as
    deploy/base's ServiceAccount, the Lease in the deploy namespace. `executor`: the leader's
    remediation executor (the live remediator, fast timings) and the approval expiry.
    `diagnosis`: the agent's diagnosis settings. `before_agent`: called with a client of the
    served API once the twin runs, before the agent starts. `settings_change`: applied last to
    the settings. `identity`: the agent's leader-election identity. `leader_election`: False
    turns the election off (the agent leads alone at once). `before_start`: called with the built
    agent before it starts (to tune a part the settings do not reach). `pipeline_class`: the
    pipeline the agent runs (a test's subclass injects a fault).
    """
    with ExitStack() as stack:
        loaded = quick(scenario) if isinstance(scenario, str) else scenario
        cluster = stack.enter_context(TwinCluster(loaded))
        access: Access | None = None
        if rbac:
            access = cluster.serve_api_as(deploy_rbac())
            path = access.kubeconfig(tmp_path / "agent.kubeconfig")
        else:
            path = kubeconfig.write(tmp_path / "kubeconfig", cluster.serve_api().url)
        prom: PrometheusServer | None = None
        if prometheus:
            target = cluster.metrics.url.removeprefix("http://")
            prom = stack.enter_context(
                running_prometheus(tmp_path, scrape_targets=[target], scrape_interval="1s")
            )
        settings = agent_settings(tmp_path, path, prom.url if prom is not None else None)
        election = replace(settings.leader_election, enabled=leader_election)
        if rbac:
            election = replace(election, namespace=deploy_namespace())
        settings = replace(settings, leader_election=election)
        if slack is not None:
            settings = with_slack(settings, slack)
        if executor:
            settings = replace(settings, remediation=replace(
                settings.remediation, **{name: getattr(FAST, name) for name in FAST_REMEDIATION}))
        if diagnosis is not None:
            settings = replace(settings, diagnosis=diagnosis)
        if settings_change is not None:
            settings = settings_change(settings)
        if before_agent is not None:
            client = build_api_client(KubernetesSettings(kubeconfig=str(path)))
            try:
                before_agent(KubeApi(client))
            finally:
                client.close()
        store = upgrade_on_start(settings)
        stack.callback(store.close)

        def pipeline(parts: Parts) -> AgentPipeline:
            if executor:
                register_executor(parts, store, live_remediator(parts, store))
                expiry.register(parts, store)
            if slack is not None:
                wire_chat(parts, store=store)
            return pipeline_class(parts, store)

        agent = Agent(settings, pipeline_factory=pipeline, identity=identity)
        if before_start is not None:
            before_start(agent)
        agent.start()
        stack.callback(agent.stop)
        yield RunningAgent(cluster, agent, store, settings, path, access, prom)


def incident_of(blocks: Iterable[Mapping[str, Any]]) -> int:
    """The incident a post's buttons carry (each button's value is the incident's id)."""
    actions = next(b for b in blocks if b["type"] == "actions")
    return int(actions["elements"][0]["value"])


def approve_from_slack(rig: RunningAgent, slack: FakeSlack, *, timeout: float) -> tuple[Any, int]:
    """Wait for the finding's top-level post with buttons, then click Approve on it as `APPROVER`
    (a signed request to the agent's events route, answered 200): the post and its incident."""

    def posted() -> Any:
        return next((m for m in slack.messages() if m.thread_ts is None
                     and any(b["type"] == "actions" for b in m.blocks)), None)  # fmt: skip

    message = wait(posted, timeout=timeout, what="the finding's post with buttons")
    incident = incident_of(message.blocks)
    answer = slack.click(rig.url + EVENTS_PATH, user=APPROVER, action_id=ButtonAction.APPROVE.value,
                         value=str(incident), channel=message.channel)  # fmt: skip
    assert answer.status == 200, answer
    return message, incident


__all__ = ["APPROVER", "CHANNEL", "RunningAgent", "agent_settings", "approve_from_slack",
           "incident_of", "running_agent", "with_slack"]
