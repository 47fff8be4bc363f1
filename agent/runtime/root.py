"""The composition root: the one place that builds the agent's parts from the settings.

Called by `agent.runtime.app.Agent` (the long-running agent of `zonemedic run` and of the coming
`demo`) and by `zonemedic sweep --once`. `Root` builds, once: the metrics registry, the Kubernetes
API client (from the kubeconfig or the in-cluster service account, or a client handed in), the slim
cluster cache and the list+watch source that fills it, the Prometheus source (only when
`prometheus.url` is set) with its egress meter (unless `egress.source` is none) and, on request,
the leader elector (a `coordination.k8s.io/v1` Lease when
`leader_election.enabled`, else always the leader). `parts()` hands them to a pipeline as `Parts`,
what a pipeline may use; a pipeline factory registers its leader-gated background jobs there.

What it does not do: run anything, except `list_once` (the one listing of `sweep --once`, whose
watches stop as soon as every resource is listed); starting and stopping the parts is the `Agent`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from starlette.routing import BaseRoute

from agent.approval.approvers import Authority
from agent.errors import ConfigError, UnavailableError
from agent.playbook.model import Playbook
from agent.remediation.fence import Leadership
from agent.runtime.leader import AlwaysLeader, LeaderElector, LeaseClient
from agent.runtime.metrics import AgentMetrics
from agent.settings import EgressSource, Settings
from agent.sources.cache import ClusterCache
from agent.sources.change import Change
from agent.sources.egress import EgressMeter
from agent.sources.kube import KubeSource
from agent.sources.kubeapi import KubeApi, build_api_client
from agent.sources.prometheus import PrometheusSource


@dataclass(frozen=True)
class BackgroundJob:
    """A job the leader runs every `every` (the outbox deliverer, the remediation executor, the
    approval expiry loop). It never runs on a follower, and never twice at once."""

    name: str
    every: timedelta
    run: Callable[[], None]


@dataclass
class Parts:
    """What a pipeline may use: built by `Root.parts`, shared read-only after start. A pipeline
    factory registers its leader-gated background jobs with `add_background_job`. `authority`:
    who may decide an incident now (the settings' `slack.approvers` and the loaded playbooks),
    the one check of every decision path (Slack, the HTTP API)."""

    settings: Settings
    playbooks: list[Playbook]
    metrics: AgentMetrics
    cache: ClusterCache
    api: KubeApi
    prometheus: PrometheusSource | None
    is_leader: Callable[[], bool]
    egress: EgressMeter | None = None
    # the elector's terms, for the remediation's write fence (None: derived from `is_leader`)
    leadership: Leadership | None = None
    extra_routes: list[BaseRoute] = field(default_factory=list)
    background_jobs: list[BackgroundJob] = field(default_factory=list)
    authority: Authority | None = None

    def __post_init__(self) -> None:
        if self.authority is None:
            self.authority = Authority.of(self.settings, self.playbooks)

    @property
    def approvers(self) -> Authority:
        """The authority every decision of this agent goes through."""
        assert self.authority is not None  # set by __post_init__
        return self.authority

    def add_background_job(self, name: str, *, every: timedelta, run: Callable[[], None]) -> None:
        """Run `run` every `every` on the leader only (paused while this replica follows)."""
        if every <= timedelta(0):
            raise ConfigError(f"background job {name!r}: the interval must be positive")
        if any(job.name == name for job in self.background_jobs):
            raise ConfigError(f"background job {name!r} is registered twice")
        self.background_jobs.append(BackgroundJob(name=name, every=every, run=run))


class Root:
    """The clients, the cluster cache and its source, built once from `settings`.

    `api_client` replaces the client the settings would build (tests and the demo hand in one for
    the twin); `on_change` receives the cache's changes (the agent's detector; None for a sweep).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        playbooks: list[Playbook],
        api_client: Any = None,
        on_change: Callable[[Change], object] | None = None,
    ) -> None:
        self.settings = settings
        self.playbooks = playbooks
        self.metrics = AgentMetrics()
        self.api = KubeApi(
            api_client if api_client is not None else build_api_client(settings.kubernetes)
        )
        self.cache = ClusterCache(
            namespaces=settings.kubernetes.namespaces,
            on_change=on_change,
            groups=settings.diagnosis.groups,
        )
        self.source = KubeSource(self.api, self.cache, on_restart=self.metrics.record_restart)
        cache = self.cache
        self.metrics.count_cache_with(
            lambda: {r.name: cache.count(r.name) for r in cache.resources()}
        )
        self.prometheus = (
            PrometheusSource(settings.prometheus, on_query=self.metrics.record_prometheus_query)
            if settings.prometheus.url
            else None
        )
        self.egress = (
            EgressMeter(self.prometheus, settings.egress)
            if self.prometheus is not None and settings.egress.source is not EgressSource.NONE
            else None
        )

    def elector(
        self,
        *,
        identity: str,
        on_started_leading: Callable[[], None],
        on_stopped_leading: Callable[[], None],
    ) -> LeaderElector | AlwaysLeader:
        """The Lease elector of `leader_election` (not started), or always the leader when it is
        disabled."""
        le = self.settings.leader_election
        if not le.enabled:
            return AlwaysLeader()
        return LeaderElector(
            LeaseClient(self.api, namespace=le.namespace, name=le.name),
            identity=identity,
            lease_duration=le.lease_duration.total_seconds(),
            renew_deadline=le.renew_deadline.total_seconds(),
            retry_period=le.retry_period.total_seconds(),
            on_started_leading=on_started_leading,
            on_stopped_leading=on_stopped_leading,
        )

    def parts(
        self, *, is_leader: Callable[[], bool], leadership: Leadership | None = None
    ) -> Parts:
        return Parts(
            settings=self.settings,
            playbooks=self.playbooks,
            metrics=self.metrics,
            cache=self.cache,
            api=self.api,
            prometheus=self.prometheus,
            is_leader=is_leader,
            egress=self.egress,
            leadership=leadership,
        )

    def list_once(self, *, timeout: float) -> None:
        """List every served resource into the cache once, then stop the watches. Raises
        `UnavailableError` naming the resources not listed within `timeout` seconds."""
        self.source.start(discovery_timeout=timeout)
        try:
            if not self.source.wait_synced(timeout):
                listed = self.cache.synced_resources()
                cached = {i.resource.name for i in self.source.informers if i.cache is self.cache}
                missing = sorted(cached - listed)
                raise UnavailableError(
                    f"the cluster was not listed within {timeout:g}s: {missing}"
                )
        finally:
            self.source.stop()
