"""Wiring of the chat layer into the agent: one function, `wire_chat`, called by the composition root.

Given the agent's `Parts` and its incident store, it builds the Slack client, the approver
directory, the Bolt app and its handlers, and returns them as a `Chat` holding the route to mount
on the agent's HTTP server (POST /slack/events, HTTP mode) and the outbox deliverer as a
leader-gated background job (`agent.runtime.root` hands both to the agent). Clicks go through
the one decision function (`agent.approval.decision.decide`), adapted here to the chat layer's
`Decide` port, so the chat layer never imports the remediation package; the function asks the
agent's authority (`Parts.authority`: the approvers in force) who may decide, and the authority
reads user group members through this chat layer's Slack client.

With `slack.enabled: false` it logs once that the agent runs without chat (findings are still
recorded and queued) and wires nothing. With Slack enabled and a secret missing it raises
`ConfigError` naming it, so start-up stops.

What it does not do: build the store or the pipeline, register anything anywhere, or start the
HTTP server.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from slack_bolt import App
from slack_sdk import WebClient
from starlette.routing import BaseRoute

from agent.approval.approvers import Authority
from agent.approval.decision import DecisionReason, DecisionRequest, decide
from agent.chatops.audit import RefusalAudit, RefusalReason
from agent.chatops.credentials import load_credentials
from agent.chatops.delivery import Deliverer, Follower, SeriesSource
from agent.chatops.directory import ApproverDirectory
from agent.chatops.ports import Clock, DecisionReply, Explain, Sweep, WhatIf
from agent.chatops.slack import ChatHandlers, build_app, events_route
from agent.chatops.verification import RequestGuard
from agent.chatops.workspace import Workspace
from agent.model.incident import Actor, ClaimedMessage, IncidentDetail, IncidentSummary
from agent.model.lifecycle import DecisionOutcome
from agent.playbook.model import Playbook
from agent.runtime.background import BackgroundJob
from agent.runtime.parts import Parts
from agent.settings import Settings, SlackMode
from agent.store.repository import IncidentStore

log = logging.getLogger(__name__)

DELIVERER_JOB = "slack-deliverer"
CLAIM_LEASE = timedelta(seconds=60)  # longer than any one delivery (Slack's timeout is 10 s)
WORKERS = 2  # threads doing the work after an acknowledgement (few: acks must not wait for the GIL)


def utc_now() -> datetime:
    return datetime.now(UTC)


class StoreOutbox:
    """The chat layer's `Outbox` port over the store's claims (a token and a lease per message:
    a deliverer that dies lets its messages come back when the lease ends)."""

    def __init__(self, store: IncidentStore, *, lease: timedelta = CLAIM_LEASE) -> None:
        self.store = store
        self.lease = lease

    def claim(self, *, now: datetime, limit: int) -> list[ClaimedMessage]:
        return self.store.claim_messages(now=now, limit=limit, lease=self.lease)

    def delivered(self, claim: ClaimedMessage, *, now: datetime, external_ref: str | None) -> bool:
        return self.store.mark_delivered(claim.message.id, token=claim.token, now=now,
                                         external_ref=external_ref)

    def failed(self, claim: ClaimedMessage, *, now: datetime, error: str) -> None:
        self.store.mark_failed(claim.message.id, token=claim.token, now=now, error=error)


class StoreDecide:
    """The chat layer's `Decide` port over the one decision function, with the agent's authority
    (who may decide is read at click time from the approvers in force)."""

    def __init__(self, store: IncidentStore, authority: Authority) -> None:
        self.store = store
        self.authority = authority

    def __call__(
        self, incident_id: int, outcome: DecisionOutcome, *, actor: Actor, now: datetime
    ) -> DecisionReply:
        result = decide(
            self.store, DecisionRequest(incident_id=incident_id, outcome=outcome, actor=actor),
            now=now, authority=self.authority,
        )
        return DecisionReply(recorded=result.recorded, status=result.status,
                             decided_by=result.decided_by, message=result.message,
                             refused=result.reason is DecisionReason.NOT_AUTHORIZED)


@dataclass
class Chat:
    """What `wire_chat` built (nothing when Slack is disabled): `routes` for the agent's HTTP
    server, `background_jobs` for its leader (the outbox deliverer)."""

    routes: list[BaseRoute] = field(default_factory=list)
    background_jobs: tuple[BackgroundJob, ...] = ()
    client: WebClient | None = None
    app: App | None = None
    handlers: ChatHandlers | None = None
    deliverer: Deliverer | None = None
    socket: Any = None  # a Socket Mode handler, started by `start`
    executor: ThreadPoolExecutor | None = None

    def start(self) -> None:
        if self.socket is not None:
            self.socket.connect()

    def stop(self) -> None:
        if self.socket is not None:
            self.socket.close()
        if self.executor is not None:
            self.executor.shutdown(wait=True, cancel_futures=False)


def sweep_command(run_sweep: Callable[[Playbook | None], Mapping[str, Any]]) -> Sweep:
    """`/zonemedic sweep`: one sweep now (the pipeline's, as `zonemedic sweep --once` runs it from
    any replica: recording is idempotent by fingerprint), summarised in one line."""

    def sweep() -> str:
        s = run_sweep(None)
        return (f"{s.get('jobs', 0)} job(s) diagnosed, {s.get('incidents_opened', 0)} incident(s) "
                f"opened, {s.get('incidents_closed', 0)} closed; metrics {s.get('metrics', '-')}")

    return sweep


def prometheus_series(parts: Parts, clock: Clock) -> SeriesSource | None:
    """The chart's samples of one job from the agent's Prometheus source (None: no Prometheus)."""
    prometheus = parts.prometheus
    if prometheus is None:
        return None

    def series(incident: IncidentSummary) -> tuple[list[tuple[float, float]], float | None] | None:
        report = prometheus.fetch(clock())
        ref = incident.job_ref
        found = report.for_job(ref) if ref is not None else None
        if found is None or len(found.samples) < 2:
            return None
        return list(found.samples), found.baseline

    return series


def build_chat(
    settings: Settings,
    *,
    store: IncidentStore,
    sweep: Sweep | None = None,
    explain: Explain | None = None,
    whatif: WhatIf | None = None,
    clock: Clock = utc_now,
    client: WebClient | None = None,
    series: SeriesSource | None = None,
    claim_lease: timedelta = CLAIM_LEASE,
    on_refused: Callable[[RefusalReason], None] | None = None,
    authority: Authority | None = None,
) -> Chat:
    """Build the chat layer from `settings.slack` (nothing when disabled); see `wire_chat`.
    Our workspace's team id is asked of `auth.test` here (again on a request if Slack is
    unreachable now); `on_refused` counts each refused request by reason. `authority`: who may
    decide (the agent's; default: `settings`' approvers and no playbooks); from here on it reads
    user groups through this chat layer's Slack client."""
    slack = settings.slack
    if not slack.enabled:
        log.info("slack is disabled: findings are recorded but not posted, and nobody can "
                 "approve from chat (set slack.enabled to post them)")
        return Chat()
    credentials = load_credentials(slack, settings.secrets)
    if client is None:
        kwargs: dict[str, Any] = {"token": credentials.bot_token, "timeout": 10}
        if slack.api_url:
            kwargs["base_url"] = slack.api_url.rstrip("/") + "/"
        client = WebClient(**kwargs)
    directory = ApproverDirectory(client, ttl=slack.usergroup_cache_ttl)
    cluster = settings.cluster_name
    if authority is None:
        authority = Authority.of(settings, ())
    authority.read_groups_with(directory.members)
    follower = Follower(store, clock=clock, cluster=cluster)
    workspace = Workspace(client)
    workspace.resolve()
    audit = RefusalAudit(on_refused)
    handlers = ChatHandlers(
        store=store, directory=directory, clock=clock, cluster=cluster,
        may_sweep=lambda actor: authority.authorize_standing(actor).allowed,
        follow=follower.follow, decide=StoreDecide(store, authority), sweep=sweep,
        explain=explain, whatif=whatif, workspace=workspace, audit=audit,
    )
    executor = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="slack-work")
    app = build_app(client=client, signing_secret=credentials.signing_secret, handlers=handlers,
                    executor=executor)

    def approvals(detail: IncidentDetail) -> bool:
        """Buttons only while someone may press them: the approvers in force now."""
        return authority.approvers(detail).configured

    deliverer = Deliverer(
        outbox=StoreOutbox(store, lease=claim_lease), store=store, client=client, clock=clock, approvals=approvals,
        follower=follower, series=series, default_channel=slack.channel, cluster=cluster,
        digest_period=slack.digest_period,
    )
    chat = Chat(client=client, app=app, handlers=handlers, deliverer=deliverer,
                executor=executor)
    if slack.mode is SlackMode.HTTP:
        assert credentials.signing_secret is not None
        chat.routes.append(events_route(app, RequestGuard(credentials.signing_secret), audit))
    else:
        from slack_bolt.adapter.socket_mode import SocketModeHandler

        chat.socket = SocketModeHandler(app, credentials.app_token)
    log.info("slack chat built", extra={"mode": slack.mode.value,
                                        "approvers": authority.standing().configured})
    return chat


def wire_chat(
    parts: Parts,
    *,
    store: IncidentStore,
    sweep: Sweep | None = None,
    explain: Explain | None = None,
    whatif: WhatIf | None = None,
    clock: Clock = utc_now,
) -> Chat:
    """The chat layer of a running agent: built from `parts.settings`, its route (HTTP mode) in
    `Chat.routes`, its deliverer as the leader-gated background job `DELIVERER_JOB`
    (`slack.deliver_every`) in `Chat.background_jobs`, the chart fed by `parts.prometheus`. The
    composition root calls it before the agent builds its HTTP app; the agent calls `Chat.start`
    once it started."""
    metrics = parts.metrics

    def count(reason: RefusalReason) -> None:
        metrics.record_slack_refusal(reason.value)

    chat = build_chat(parts.settings, store=store, sweep=sweep, explain=explain, whatif=whatif,
                      clock=clock,
                      series=prometheus_series(parts, clock), on_refused=count,
                      authority=parts.approvers)
    if chat.deliverer is None:
        return chat
    deliverer = chat.deliverer

    def deliver() -> None:
        deliverer.run()

    chat.background_jobs = (
        BackgroundJob(DELIVERER_JOB, every=parts.settings.slack.deliver_every, run=deliver),
    )
    return chat
