"""A whole zonemedic agent running in-process on the twin, for end-to-end tests, started by the
one agent rig (`agent.rig.rig.AgentRig`, which the demo and the soak start theirs with).

Who calls it: the end-to-end tests that start one real `Agent` (watches, detector, playbooks,
HTTP API; optionally the chat layer, the remediation executor and a real Prometheus) against the
twin over HTTP. `running_agent(tmp_path, scenario, ...)` starts, through the rig in `tmp_path`,
the twin for the scenario (a packaged scenario's name is loaded with fast pods, `quick`) with its
API served (with no authentication, or with `rbac` as deploy/base's ServiceAccount with exactly
its RBAC, the Lease then in the deploy namespace), optionally a real Prometheus scraping the
twin's exporter, the settings from the rig's one settings builder (`agent_config`: the file
`zonemedic run --config` reads), the chat layer on a fake Slack when one is given, the
remediation executor (fast remediation timings) and the approval expiry when asked, all through
the composition root as `zonemedic run` builds them, starts the agent and yields a
`RunningAgent`; on exit the rig stops everything in reverse order. `agent_settings` is the same
settings for the tests that start several agents themselves. `approve_from_slack` is the
approver's side of the chat: it waits for the finding's post with buttons and clicks Approve on
it; `incident_of` reads the incident a post's buttons carry.

What it does not do: run more than one agent (tests of several replicas build theirs), wait for
the agent to be ready or to lead (each test waits on the conditions it tests), or open the
database some other way than the agent's own start-up migration.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from agent.chatops.blocks import ButtonAction
from agent.chatops.slack import EVENTS_PATH
from agent.fakes.slack import FakeSlack
from agent.rig.config import SHORT_LEASE, AgentConfig, SlackConfig
from agent.rig.rig import AgentRig
from agent.runtime.app import Agent
from agent.runtime.pipeline import AgentPipeline
from agent.runtime.root import Injected
from agent.settings import DiagnosisSettings, KubernetesSettings, Settings
from agent.sources.kubeapi import KubeApi, build_api_client
from agent.store.repository import IncidentStore
from agent.twin.access import Access
from agent.twin.cluster import TwinCluster
from agent.twin.scenario import Scenario
from tests.remediation.harness import FAST, deploy_namespace, deploy_rbac, quick
from tests.support.prometheus import PROMETHEUS, PrometheusServer
from tests.support.waiting import wait

REPO = Path(__file__).resolve().parents[2]
CHANNEL = "C0FAKE"
APPROVER = "U1"  # the one Slack user allowed to approve
FAST_REMEDIATION = ("suspend_timeout", "schedule_timeout", "verify_window", "poll_interval")


def _duration(value: timedelta) -> str:
    return f"{round(value.total_seconds() * 1000)}ms"


def agent_config(tmp_path: Path, kubeconfig_path: Path, prometheus_url: str | None, *,
                 slack: SlackConfig | None = None, executor: bool = False,
                 election: Mapping[str, Any] | None = None,
                 playbooks: Path | None = None) -> AgentConfig:  # fmt: skip
    """The agent's configuration for a test on the twin: the shipped playbooks, SQLite in
    `tmp_path`, HTTP on a free loopback port, a short leader lease in `default` (`election`: other
    keys of that section), Prometheus (when given) with a short timeout, no retry and a 20 s drop
    window, metrics refreshed every second; `slack`: the chat layer's section; `executor`: the
    fast remediation timings; `playbooks`: another playbooks directory than the shipped one."""
    sections: dict[str, dict[str, Any]] = {}
    if executor:
        sections["remediation"] = {name: _duration(getattr(FAST, name)) for name in FAST_REMEDIATION}
    return AgentConfig(directory=tmp_path, kubeconfig=kubeconfig_path, playbooks_dir=playbooks or REPO / "playbooks",
                       prometheus_url=prometheus_url, slack=slack, sections=sections,
                       leader_election={"namespace": "default", **SHORT_LEASE, **(election or {})})  # fmt: skip


def agent_settings(tmp_path: Path, kubeconfig_path: Path, prometheus_url: str | None) -> Settings:
    """`agent_config`'s settings, read from its file `config.yaml` in `tmp_path`."""
    return AgentRig(tmp_path).settings(agent_config(tmp_path, kubeconfig_path, prometheus_url))


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
    pipeline_class: type[AgentPipeline] = AgentPipeline, playbooks: Path | None = None,
) -> Iterator[RunningAgent]:  # fmt: skip
    """One agent on the twin serving `scenario` (a packaged scenario's name is loaded `quick`).

    `slack`: the chat layer wired to that (running) fake Slack. `prometheus`: a real Prometheus
    scraping the twin's exporter every second, the agent's metrics source. `rbac`: the API served
    over TLS as deploy/base's ServiceAccount, the Lease in the deploy namespace. `executor`: the
    leader's remediation executor (the live remediator, fast timings) and the approval expiry.
    `diagnosis`: the agent's diagnosis settings. `before_agent`: called with a client of the
    served API once the twin runs, before the agent starts. `settings_change`: applied last to
    the settings. `identity`: the agent's leader-election identity. `leader_election`: False
    turns the election off (the agent leads alone at once). `before_start`: called with the built
    agent before it starts (to tune a part the settings do not reach). `pipeline_class`: the
    pipeline the agent runs (a test's subclass injects a fault). `playbooks`: the playbooks
    directory (default: the shipped one).
    """
    with AgentRig(tmp_path) as rig:
        loaded = quick(scenario) if isinstance(scenario, str) else scenario
        cluster = rig.start_twin(loaded, rbac=deploy_rbac() if rbac else None)
        prom = rig.start_prometheus(binary=Path(PROMETHEUS), server=PrometheusServer,
                                    directory=tmp_path / "prometheus") if prometheus else None  # fmt: skip
        chat = None
        if slack is not None:
            chat = rig.slack_config(channel=CHANNEL, approvers=[APPROVER], slack=slack)
        election: dict[str, Any] = {"enabled": leader_election}
        if rbac:
            election["namespace"] = deploy_namespace()
        config = agent_config(tmp_path, rig.kubeconfig, prom.url if prom is not None else None,
                              slack=chat, executor=executor, election=election,
                              playbooks=playbooks)  # fmt: skip
        settings = rig.settings(config)
        if diagnosis is not None:
            settings = replace(settings, diagnosis=diagnosis)
        if settings_change is not None:
            settings = settings_change(settings)
        if before_agent is not None:
            client = build_api_client(KubernetesSettings(kubeconfig=str(rig.kubeconfig)))
            try:
                before_agent(KubeApi(client))
            finally:
                client.close()
        injected = Injected(remediation=executor, pipeline_class=pipeline_class)
        running = rig.start_agent(settings, injected=injected, identity=identity,
                                  before_start=before_start)  # fmt: skip
        yield RunningAgent(cluster, running.agent, running.store, settings, rig.kubeconfig,
                           rig.access, prom)  # fmt: skip


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


__all__ = ["APPROVER", "CHANNEL", "RunningAgent", "agent_config", "agent_settings",
           "approve_from_slack", "incident_of", "running_agent"]
