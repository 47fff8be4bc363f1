"""The parts every piece of a running agent may share: the clients the composition root built.

Built once by `agent.runtime.root.Root` (tests build one by hand over a fed cache) and handed to
the builders that need more than one client: the pipeline's pieces (`root.pipeline_pieces`; the
pipeline itself is handed only the settings, the cache, Prometheus and `is_leader`), the
remediation executor's live remediator, the chat wiring, the incidents API. Shared read-only after start: nothing is
registered on it (the root returns the routes and background jobs it built).

What it does not do: build anything (the root does) or run anything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from agent.approval.approvers import Authority
from agent.playbook.model import Playbook
from agent.remediation.fence import Leadership
from agent.runtime.metrics import AgentMetrics
from agent.settings import Settings
from agent.sources.cache import ClusterCache
from agent.sources.egress import EgressMeter
from agent.sources.kubeapi import KubeApi
from agent.sources.prometheus import PrometheusSource


@dataclass(frozen=True)
class Parts:
    """The settings, the playbooks and the clients built from them. `is_leader`: whether this
    replica leads now; `leadership`: the elector's terms, for the remediation's write fence (None:
    derived from `is_leader`); `authority`: who may decide an incident now (the settings'
    `slack.approvers` and the loaded playbooks; derived from them when not given), the one check
    of every decision path (Slack, the HTTP API)."""

    settings: Settings
    playbooks: list[Playbook]
    metrics: AgentMetrics
    cache: ClusterCache
    api: KubeApi
    prometheus: PrometheusSource | None
    is_leader: Callable[[], bool]
    egress: EgressMeter | None = None
    leadership: Leadership | None = None
    authority: Authority | None = field(default=None)

    def __post_init__(self) -> None:
        if self.authority is None:
            object.__setattr__(self, "authority", Authority.of(self.settings, self.playbooks))

    @property
    def approvers(self) -> Authority:
        """The authority every decision of this agent goes through."""
        assert self.authority is not None  # set by __post_init__
        return self.authority
