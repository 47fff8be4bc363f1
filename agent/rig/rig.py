"""The one agent rig: the cluster twin, the fake Slack, a real Prometheus and zonemedic agents
started in one directory on 127.0.0.1, stopped in reverse order.

Who calls it: the demo's stage (`agent.demo.stage`), the end-to-end tests (through
`tests/support/agent_rig.py`, which adds the approver's clicks) and the soak (`tests/soak/rig.py`).
`AgentRig(directory)` is a context manager over an `ExitStack`: every `start_*` registers the
part's stop, and leaving the rig (an error and Ctrl-C included) stops them all, the last started
first. The parts, each at most once except agents:

- `start_slack(...)`: the fake Slack Web API (`agent.fakes.slack`);
- `start_twin(scenario, rbac=...)`: the twin serving the scenario, its API over HTTP (every
  request the admin, kubeconfig `kubeconfig`) or, given RBAC manifests, over TLS as their
  ServiceAccount with exactly their rights (kubeconfig `agent.kubeconfig`);
- `start_prometheus(binary=...)`: a real Prometheus scraping the twin's exporter every second;
- `slack_config(...)`: the agent's Slack section over the fake Slack (its secrets written to
  files in the directory; a fake the caller started will do);
- `config_file(config)` and `settings(config)`: the one settings builder's file
  (`agent.rig.config.AgentConfig`) written, and read back by `load_settings` as `zonemedic run
  --config` reads it;
- `start_agent(settings, ...)`: an agent in this process, built by the composition root
  (`agent.runtime.root.Root`) over the store its start-up migration opens, started through
  `agent.runtime.app.Agent`; `start_process(config_file)`: `zonemedic run --config` as a process.

What it does not do: decide what a story or a test does with the parts, wait for an agent to
lead, or write anything outside its directory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from agent.errors import ConfigError
from agent.fakes.slack import FakeSlack
from agent.playbook.model import Playbook
from agent.rig.config import AgentConfig, SlackConfig
from agent.rig.process import AgentProcess
from agent.rig.prometheus import PrometheusServer
from agent.runtime.app import Agent
from agent.runtime.root import Injected, Root
from agent.settings import Settings, load_settings
from agent.store.migrate import upgrade_on_start
from agent.store.repository import IncidentStore
from agent.twin import kubeconfig
from agent.twin.access import Access
from agent.twin.cluster import TwinCluster
from agent.twin.scenario import Scenario

P = TypeVar("P", bound=PrometheusServer)


@dataclass(frozen=True)
class InProcessAgent:
    """An agent started in this process and the store its start-up migration opened."""

    agent: Agent
    store: IncidentStore
    settings: Settings

    @property
    def url(self) -> str:
        return self.agent.url


class AgentRig:
    """The running parts of one rig (see the module docstring)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.slack: FakeSlack | None = None
        self.cluster: TwinCluster | None = None
        self.access: Access | None = None  # with RBAC: the API server and the tokens
        self.kubeconfig = directory / "kubeconfig"
        self.prometheus: PrometheusServer | None = None
        self._stack = ExitStack()

    def __enter__(self) -> AgentRig:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stack.close()

    def callback(self, stop: Callable[[], object]) -> None:
        """Run `stop` when the rig stops, before the parts started so far."""
        self._stack.callback(stop)

    # -- the outside services ----------------------------------------------------------------------

    def start_slack(self, **fake: Any) -> FakeSlack:
        """The fake Slack (`FakeSlack(**fake)`: its users, user groups, secrets)."""
        slack = FakeSlack(**fake)
        slack.start()
        self._stack.callback(slack.stop)
        self.slack = slack
        return slack

    def slack_config(self, *, channel: str, approvers: Sequence[str],
                     usergroups: Sequence[str] | None = None, deliver_every: str = "200ms",
                     slack: FakeSlack | None = None) -> SlackConfig:
        """The agent's Slack section over the rig's fake Slack (or `slack`, one started by the
        caller), its secrets in files here."""
        fake = slack or self.slack
        if fake is None:
            raise ConfigError("slack_config: start the fake Slack first")
        config = SlackConfig(api_url=fake.base_url, bot_token=fake.bot_token,
                             signing_secret=fake.signing_secret, channel=channel,
                             approvers=approvers, usergroups=usergroups,
                             deliver_every=deliver_every)  # fmt: skip
        config.write_secrets(self.directory)
        return config

    def start_twin(
        self, scenario: Scenario, *, rbac: Sequence[Mapping[str, Any]] | None = None,
        before_start: Callable[[TwinCluster], Callable[[], object] | None] | None = None,
    ) -> TwinCluster:  # fmt: skip
        """The twin serving `scenario`, its API served (see the module docstring).
        `before_start`: called with the cluster before it starts (a subscription to its store
        that must see the seeding); what it returns is called when the rig stops."""
        cluster = TwinCluster(scenario)
        self._stack.callback(cluster.stop)
        if before_start is not None:
            undo = before_start(cluster)
            if undo is not None:
                self._stack.callback(undo)
        cluster.start()
        self.cluster = cluster
        if rbac is not None:
            self.access = cluster.serve_api_as(rbac)
            self.kubeconfig = self.access.kubeconfig(self.directory / "agent.kubeconfig")
        else:
            kubeconfig.write(self.kubeconfig, cluster.serve_api().url)
        return cluster

    def start_prometheus(
        self, *, binary: Path, server: type[P],
        retention: str = "30d", directory: Path | None = None,
    ) -> P:  # fmt: skip
        """A real Prometheus (`server`: `PrometheusServer` or a subclass adding waits) scraping
        the twin's exporter every second, its TSDB under `directory` (default `prometheus/`)."""
        if self.cluster is None:
            raise ConfigError("start_prometheus: start the twin first")
        target = self.cluster.metrics.url.removeprefix("http://")
        prometheus = server(directory or self.directory / "prometheus", binary=binary,
                            scrape_targets=[target], scrape_interval="1s", retention=retention)
        self._stack.callback(prometheus.stop)
        prometheus.start()
        self.prometheus = prometheus
        return prometheus

    # -- the agents --------------------------------------------------------------------------------

    def agent_config(self, **config: Any) -> AgentConfig:
        """The one settings builder over this rig: its directory, its twin's kubeconfig and its
        Prometheus (when running) unless `config` says otherwise."""
        config.setdefault("directory", self.directory)
        config.setdefault("kubeconfig", self.kubeconfig)
        if self.prometheus is not None:
            config.setdefault("prometheus_url", self.prometheus.url)
        return AgentConfig(**config)

    def config_file(self, config: AgentConfig, *, name: str = "config.yaml") -> Path:
        """The configuration file `name` in the rig's directory."""
        path = self.directory / name
        path.write_text(yaml.safe_dump(config.document(), sort_keys=False))
        return path

    def settings(self, config: AgentConfig, *, name: str = "config.yaml") -> Settings:
        """The settings `zonemedic run --config` reads from that file (no environment)."""
        return load_settings(self.config_file(config, name=name), {})

    def start_agent(
        self, settings: Settings, *, playbooks: list[Playbook] | None = None,
        injected: Injected | None = None, identity: str | None = None,
        sync_timeout: float = 120.0, before_start: Callable[[Agent], None] | None = None,
    ) -> InProcessAgent:  # fmt: skip
        """An agent in this process over the store its start-up migration opens (closed when the
        rig stops, after the agent). `before_start`: called with the built agent first."""
        store = upgrade_on_start(settings)
        self._stack.callback(store.close)
        agent = Agent(Root(settings, store=store, playbooks=playbooks, injected=injected),
                      identity=identity, sync_timeout=sync_timeout)  # fmt: skip
        self._stack.callback(agent.stop)
        if before_start is not None:
            before_start(agent)
        agent.start()
        return InProcessAgent(agent, store, settings)

    def start_process(self, config_file: Path, *, timeout: float = 90.0) -> AgentProcess:
        """`zonemedic run --config config_file` as a process, once it serves HTTP."""
        process = AgentProcess(config_file)
        self._stack.callback(process.stop)
        process.wait_url(timeout=timeout)
        return process
