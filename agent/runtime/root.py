"""The composition root: the one place that builds the agent's parts from the settings.

Who calls it: `zonemedic run` and the demo (`Root(settings, store=...)` handed to
`agent.runtime.app.Agent`, which calls `compose` with its lifecycle's hooks), `zonemedic sweep
--once` (`clients`, `list_once`, then `sweep_pipeline`), and tests (with `Injected` parts).

`compose` builds every part once and returns them as a `Composition`: the clients (`Clients`:
the metrics registry, the Kubernetes API client from the kubeconfig or the in-cluster service
account or the one injected, the slim cluster cache and the list+watch source that fills it, with
Cilium's PacketDrop reader when `kubernetes.packet_drop_events`, the Prometheus source only when
`prometheus.url` is set, with its egress meter unless `egress.source` is none), the leader
elector (a `coordination.k8s.io/v1` Lease when `leader_election.enabled`, else always the
leader), the `Parts` the pieces share, the pipeline's pieces and the pipeline over them
(`pipeline_pieces`, `build_pipeline`), the remediation executor and the approval expiry, the chat
layer (`agent.runtime.chat.wire_chat`), the alert receiver and the incidents API, and, when
`admission.enabled`, the admission webhook (`agent.runtime.admission`); its `routes`
(what the agent's HTTP app serves) and its `background_jobs` (what the leader runs: the metrics
refresh, the executor, the expiry, the Slack outbox deliverer) are returned, not registered
anywhere.

What it does not do: run anything, except `Clients.list_once` (the one listing of `sweep --once`,
whose watches stop as soon as every resource is listed); starting and stopping the parts, in their
order, is the `Agent`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.applications import Starlette
from starlette.routing import BaseRoute

from agent.admission.decision import View
from agent.approval import expiry
from agent.approval.requests import ApprovalRequests
from agent.errors import ConfigError, UnavailableError
from agent.model.job import JobRef
from agent.playbook.loader import load_playbooks, playbooks_directory
from agent.playbook.model import Playbook
from agent.remediation.fence import Leadership
from agent.runtime import chat, remediation_queue
from agent.runtime.admission import AdmissionService, build_admission
from agent.runtime.alerts import AlertReceiver
from agent.runtime.background import BackgroundJob, unique
from agent.runtime.diagnoser import Diagnoser
from agent.runtime.drops import DropMessages
from agent.runtime.evidence import UtilizationReadings
from agent.runtime.explainer import LiveExplainer
from agent.runtime.http import build_app
from agent.runtime.incidents import StoreIncidents, database_readiness
from agent.runtime.leader import AlwaysLeader, LeaderElector, LeaseClient
from agent.runtime.metrics import AgentMetrics
from agent.runtime.open_incidents import OpenIncidents
from agent.runtime.parts import Parts
from agent.runtime.pipeline import AgentPipeline, PipelinePieces
from agent.runtime.plan_previews import PlanPreviews
from agent.runtime.playbooks import PlaybookActions
from agent.runtime.recording import Recorder, RecordingParts
from agent.runtime.revisit import FollowedChanges, WaitingRoom
from agent.runtime.settle import SettleWait
from agent.runtime.signals import Signals
from agent.runtime.store_work import IncidentGauge, StoreWorkLedger
from agent.runtime.unrecorded import FollowedProblems
from agent.runtime.waste import SplitWaste
from agent.runtime.webhook_credentials import WebhookCredentials
from agent.runtime.whatif import LiveWhatIf
from agent.settings import EgressSource, Settings, read_secret_file
from agent.sources.alertmanager import Alert
from agent.sources.cache import ClusterCache
from agent.sources.change import Change
from agent.sources.egress import EgressMeter
from agent.sources.kube import KubeSource
from agent.sources.kubeapi import KubeApi, build_api_client
from agent.sources.packetdrops import DropEventReader, PacketDrop
from agent.sources.prometheus import PrometheusSource
from agent.sources.resources import PACKET_DROP_EVENTS
from agent.store.repository import IncidentStore

METRICS_REFRESH_JOB = "metrics-refresh"

# the remediation executor's runner over the agent's parts (the live remediator by default)
RunnerFactory = Callable[[Parts, IncidentStore], remediation_queue.IncidentRunner]


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Injected:
    """What tests and the demo hand in instead of what the settings would build. `api_client`:
    the Kubernetes client (the twin's); `runner`: the executor's runner (default: the live
    remediator); `remediation`: False builds neither the executor nor the expiry;
    `pipeline_class`: the pipeline (a test's subclass injects a fault or counts batches);
    `background_jobs`: more leader-gated jobs."""

    api_client: Any = None
    runner: RunnerFactory | None = None
    remediation: bool = True
    pipeline_class: type[AgentPipeline] = AgentPipeline
    background_jobs: tuple[BackgroundJob, ...] = ()


@dataclass(frozen=True)
class Hooks:
    """Where the running agent takes the parts' events: cache changes (its detector), alerts and
    Cilium's drops (the pipeline, then its detector), the elector's term starting and ending."""

    on_change: Callable[[Change], object]
    on_alert: Callable[[Alert, list[JobRef]], bool]
    on_packet_drops: Callable[[list[PacketDrop]], None]
    on_started_leading: Callable[[], None]
    on_stopped_leading: Callable[[], None]


class Clients:
    """The clients, the cluster cache and its source, built once from `settings`.

    `api_client` replaces the client the settings would build (tests and the demo hand in one for
    the twin); `on_change` receives the cache's changes (the agent's detector; None for a sweep).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        api_client: Any = None,
        on_change: Callable[[Change], object] | None = None,
    ) -> None:
        self.settings = settings
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
        self,
        *,
        playbooks: list[Playbook],
        is_leader: Callable[[], bool],
        leadership: Leadership | None = None,
    ) -> Parts:
        """What the pieces share: these clients, the settings and `playbooks`."""
        return Parts(
            settings=self.settings,
            playbooks=playbooks,
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


def pipeline_pieces(
    parts: Parts,
    store: IncidentStore | None,
    *,
    now: Callable[[], datetime] = utc_now,
    monotonic: Callable[[], float] = time.monotonic,
) -> PipelinePieces:
    """The pipeline's collaborators over `parts` and `store` (None: it records nothing), each
    built once and wired to the others."""
    settings, metrics, cache = parts.settings, parts.metrics, parts.cache
    cluster, measured = settings.cluster_name, parts.prometheus is not None
    diagnoser = Diagnoser(cache, settings=settings.diagnosis)
    open_incidents = OpenIncidents(store, cluster=cluster, now=now)
    evidence = UtilizationReadings(configured=measured, store=store,
                                   open_incidents=open_incidents, now=now)  # fmt: skip
    waste = SplitWaste(meter=parts.egress, configured=measured, metrics=metrics, store=store,
                       settings=settings.diagnosis, job=diagnoser.job, now=now)  # fmt: skip
    drops = DropMessages(store=store, cache=cache, diagnoser=diagnoser,
                         open_incidents=open_incidents, metrics=metrics,
                         is_leader=parts.is_leader, now=now)  # fmt: skip
    room = WaitingRoom()
    approvals = (ApprovalRequests(store, settings=settings, now=now)
                 if store is not None else None)  # fmt: skip
    previews = (PlanPreviews(parts.api, store, now=now, cluster=settings.cluster_name)
                if store is not None and settings.remediation.preview else None)  # fmt: skip
    actions = PlaybookActions(
        playbooks=parts.playbooks, store=store, cache=cache, cluster=cluster,
        channel=settings.slack.channel, approvals=approvals, previews=previews,
        approval_ttl=settings.slack.approval_ttl, now=now,
    )  # fmt: skip
    recorder = Recorder(RecordingParts(
        store=store, cluster=cluster, cache=cache, metrics=metrics, open=open_incidents,
        evidence=evidence, waste=waste, room=room, drops=drops, diagnoser=diagnoser,
        actions=actions, previews=previews,
    ), now=now, monotonic=monotonic)  # fmt: skip
    settle = SettleWait(
        timeout=settings.detection.label_settle_timeout.total_seconds(), cache=cache,
        recorder=recorder, monotonic=monotonic,
    )  # fmt: skip
    signals = Signals(recorder=recorder, open_incidents=open_incidents, evidence=evidence,
                      actions=actions, cache=cache, now=now)  # fmt: skip
    return PipelinePieces(
        diagnoser=diagnoser, open=open_incidents, evidence=evidence, waste=waste, drops=drops,
        room=room, followed=FollowedChanges(), problems=FollowedProblems(cache=cache, now=now),
        previews=previews, actions=actions,
        recorder=recorder, settle=settle, signals=signals, work=StoreWorkLedger(metrics),
        gauge=IncidentGauge(store, cluster=cluster, metrics=metrics),
    )  # fmt: skip


def build_pipeline(
    parts: Parts,
    store: IncidentStore | None,
    *,
    now: Callable[[], datetime] = utc_now,
    monotonic: Callable[[], float] = time.monotonic,
    cls: type[AgentPipeline] = AgentPipeline,
) -> AgentPipeline:
    """The pipeline (`cls`) over what it uses of `parts` and its pieces (`pipeline_pieces`)."""
    return cls(settings=parts.settings, cache=parts.cache, prometheus=parts.prometheus,
               is_leader=parts.is_leader, store=store,
               pieces=pipeline_pieces(parts, store, now=now, monotonic=monotonic), now=now)


@dataclass(frozen=True)
class Remediation:
    """The leader's remediation executor and approval expiry, and their background jobs."""

    executor: remediation_queue.RemediationExecutor
    expiry: expiry.ApprovalExpiry
    background_jobs: tuple[BackgroundJob, ...]


def remediation(parts: Parts, store: IncidentStore, runner: remediation_queue.IncidentRunner) -> Remediation:
    """The executor over `runner` (its job `remediation-executor` only when
    `remediation.enabled`: decisions are still recorded and expired otherwise) and the expiry
    (job `approval-expiry`), both every `remediation.pickup_interval`."""
    settings = parts.settings
    cache = parts.cache
    runs = remediation_queue.RemediationExecutor(
        store, runner, cluster=settings.cluster_name, settings=settings.remediation,
        protected_namespaces=settings.diagnosis.protected_namespaces,
        objects_of=lambda job: remediation_queue.cached_objects(cache, job),
    )  # fmt: skip
    expires = expiry.ApprovalExpiry(store)
    every = settings.remediation.pickup_interval
    jobs = [BackgroundJob(remediation_queue.JOB, every=every, run=runs.tick)] if settings.remediation.enabled else []
    jobs.append(BackgroundJob(expiry.JOB, every=every, run=expires.tick))
    return Remediation(executor=runs, expiry=expires, background_jobs=tuple(jobs))


@dataclass(frozen=True)
class Routes:
    """What the agent's HTTP app serves besides health and metrics: the Alertmanager webhook
    (`alerts`, behind `webhook_credentials`), the incidents API (None without a store; its
    writes behind `api_token`) and the chat layer's routes (`extra`)."""

    alerts: AlertReceiver
    incidents: StoreIncidents | None
    api_token: str | None
    webhook_credentials: WebhookCredentials | None
    extra: tuple[BaseRoute, ...]
    explainer: LiveExplainer | None = None
    whatif: LiveWhatIf | None = None

    def app(self, *, metrics: AgentMetrics, readiness: Callable[[], dict[str, bool]]) -> Starlette:
        return build_app(
            metrics=metrics, readiness=readiness, alerts=self.alerts, incidents=self.incidents,
            api_token=self.api_token, decisions=self.incidents, extra_routes=self.extra,
            webhook_credentials=self.webhook_credentials, explainer=self.explainer,
            whatif=self.whatif,
        )  # fmt: skip


@dataclass(frozen=True)
class Composition:
    """Every part of one running agent, built once by `Root.compose`."""

    clients: Clients
    parts: Parts
    elector: LeaderElector | AlwaysLeader
    store: IncidentStore | None
    pipeline: AgentPipeline
    routes: Routes
    background_jobs: tuple[BackgroundJob, ...]
    chat: chat.Chat
    remediation: Remediation | None
    admission: AdmissionService | None = None

    def database_readiness(self) -> dict[str, bool]:
        """The store's part of /readyz (`agent.runtime.incidents.database_readiness`)."""
        return database_readiness(self.store, timeout=self.parts.settings.http.database_timeout)


class Root:
    """The composition root over `settings` and the incident store (None: nothing is recorded,
    and neither remediation nor chat is built). `playbooks`: the loaded playbooks (default: read
    from `playbooks_dir`); `injected`: what tests and the demo hand in."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: IncidentStore | None = None,
        playbooks: list[Playbook] | None = None,
        injected: Injected | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.playbooks = (
            playbooks
            if playbooks is not None
            else load_playbooks(playbooks_directory(settings.playbooks_dir))
        )
        self.injected = injected or Injected()
        self._clients: Clients | None = None

    def clients(self, *, on_change: Callable[[Change], object] | None = None) -> Clients:
        """The clients, built on the first call (`on_change`: where the cache's changes go)."""
        if self._clients is not None:
            raise ConfigError("the composition root builds its clients once")
        self._clients = Clients(self.settings, api_client=self.injected.api_client,
                                on_change=on_change)  # fmt: skip
        return self._clients

    def sweep_pipeline(self, store: IncidentStore) -> AgentPipeline:
        """The pipeline of `zonemedic sweep --once` over the listed clients: one process, run on
        purpose, so always the leader; no remediation, no chat, no HTTP."""
        if self._clients is None:
            raise ConfigError("sweep_pipeline: build and list the clients first")
        parts = self._clients.parts(playbooks=self.playbooks, is_leader=AlwaysLeader().is_leader)
        return build_pipeline(parts, store, cls=self.injected.pipeline_class)

    def compose(self, hooks: Hooks, *, identity: str) -> Composition:
        """Every part of the running agent `identity`, once (see the module's docstring)."""
        settings, store, injected = self.settings, self.store, self.injected
        clients = self.clients(on_change=hooks.on_change)
        elector = clients.elector(identity=identity, on_started_leading=hooks.on_started_leading,
                                  on_stopped_leading=hooks.on_stopped_leading)  # fmt: skip
        parts = clients.parts(playbooks=self.playbooks, is_leader=elector.is_leader,
                              leadership=elector)  # fmt: skip
        if settings.kubernetes.packet_drop_events:
            ignored = clients.metrics.packet_drops.labels(outcome="ignored")
            clients.source.add_reader(
                PACKET_DROP_EVENTS, DropEventReader(hooks.on_packet_drops, on_ignored=ignored.inc)
            )
        pipeline = build_pipeline(parts, store, cls=injected.pipeline_class)
        explainer = LiveExplainer(pipeline.parsed_view, settings=settings.diagnosis,
                                  ready=lambda: clients.cache.synced)  # fmt: skip
        whatif = LiveWhatIf(pipeline.held_view, settings=settings.diagnosis,
                            ready=lambda: clients.cache.synced)  # fmt: skip
        jobs: list[BackgroundJob] = []
        if clients.prometheus is not None:
            seconds = max(1.0, settings.detection.metrics_interval.total_seconds())
            jobs.append(BackgroundJob(METRICS_REFRESH_JOB, every=timedelta(seconds=seconds),
                                      run=pipeline.refresh_metrics))  # fmt: skip
        remediating: Remediation | None = None
        wired = chat.Chat()
        if store is not None:
            if injected.remediation:
                runner = (injected.runner or remediation_queue.live_remediator)(parts, store)
                remediating = remediation(parts, store, runner)
                jobs.extend(remediating.background_jobs)
            wired = chat.wire_chat(parts, store=store, sweep=chat.sweep_command(pipeline.sweep),
                                   explain=explainer.explain, whatif=whatif.delete)
            jobs.extend(wired.background_jobs)
        jobs.extend(injected.background_jobs)
        cache = clients.cache
        alerts = AlertReceiver(
            jobs_named=cache.jobs_named,
            job_of_pod=cache.job_of_pod,
            ready=lambda: cache.synced,
            on_alert=hooks.on_alert,
            on_outcome=lambda outcome: clients.metrics.alerts.labels(outcome=outcome).inc(),
        )
        token_file = settings.http.api_token_file
        routes = Routes(
            alerts=alerts,
            incidents=StoreIncidents.of(store, parts) if store is not None else None,
            api_token=read_secret_file(token_file, key="http.api_token_file") if token_file else None,
            webhook_credentials=WebhookCredentials.of(settings.alertmanager),
            extra=tuple(wired.routes),
            explainer=explainer,
            whatif=whatif,
        )
        admission = None
        if settings.admission.enabled:
            admission = build_admission(
                settings, view=lambda: View(*pipeline.parsed_view()),
                ready=lambda: clients.cache.synced, store=store, metrics=clients.metrics,
                api_client=clients.api.api_client, now=utc_now,
            )  # fmt: skip
        return Composition(
            clients=clients, parts=parts, elector=elector, store=store, pipeline=pipeline,
            routes=routes, background_jobs=unique(jobs), chat=wired, remediation=remediating,
            admission=admission,
        )  # fmt: skip
