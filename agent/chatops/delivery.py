"""Delivery of the outbox to Slack, and the follower that queues an incident's story into it.

Who calls it: the chat wiring returns `Deliverer.run` as a leader-gated background job (one
replica delivers, never two rounds at once); the click handler calls `Follower.follow` after a
recorded decision.

Every outgoing Slack message is an outbox message first (the store keeps it across crashes and
outages); nothing posts directly. Messages (payload shapes):
- `post` (the pipeline's playbook actions): the incident's message. The first one posts it; any
  later one (a second playbook action, a re-detection) updates that same message (`chat.update`,
  its `channel|ts` kept as the delivered message's external ref) instead of posting again. A post
  queues the chart as its own message, so a failed upload never re-posts the finding.
- `update` with `{"refresh": true}`: re-render the incident's message from the store (e.g. the
  buttons replaced by the decision); `{"thread_event": ID}`: one thread reply telling a timeline
  event; `{"chart": true}`: the utilization chart uploaded into the thread (v2 upload flow). While
  the job has no samples yet the chart is retried (for `chart_patience` after the incident opened);
  without metrics there is no chart. A chart is queued without its incident (the id is in its
  payload), so it keeps no place in the incident's order.
- `digest`: open incidents, resolved in the period and GPU-hours recovered, from the store, and
  the admission webhook's week (jobs placed at admission, restarts avoided) when it decided any.

Order per incident holds: the store lets a message be claimed only when every earlier message of
its incident is delivered or dead. Slack down (5xx, connection errors) or
rate limiting (429) fails the attempt: the store schedules the next with backoff, nothing is
dropped; a 429 also pauses the whole deliverer for its `Retry-After` (a message claimed meanwhile
is left to its claim's lease: no attempt is counted).

The follower turns timeline events into `update` messages with dedupe keys (`slack:thread:{event}`,
`slack:refresh:{incident}:{event}`), so following an incident twice queues nothing twice; it looks
at open and recently updated incidents at most every 5 s.

What it does not do: render (render does), decide, or run on a follower replica.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError

from agent.chatops.blocks import Rendered
from agent.chatops.chart import utilization_png
from agent.chatops.ports import ChatStore, Clock, Outbox
from agent.chatops.render import (
    REFRESH_EVENTS,
    THREAD_EVENTS,
    Utilization,
    incident_message,
    thread_update,
)
from agent.chatops.replies import digest_message
from agent.errors import InputError, ZonemedicError
from agent.model.incident import (
    ClaimedMessage,
    IncidentDetail,
    IncidentQuery,
    IncidentSummary,
    OutboxMessage,
    TimelineEvent,
)
from agent.model.lifecycle import EventKind, MessageKind, MessageStatus
from agent.model.proposal import ProposedFix
from agent.model.proposal import proposed_fix as latest_fix
from agent.model.stored import StoredMetrics, StoredWaste

log = logging.getLogger(__name__)
ADMISSION_WINDOW = timedelta(days=7)  # the digest's admission line: this week

REF_SEPARATOR = "|"
PROPOSE = "propose_colocation"  # the playbook action whose post carries the Approve button
Samples = Sequence[tuple[float, float]]
SeriesSource = Callable[[IncidentSummary], tuple[Samples, float | None] | None]


class DeliveryError(Exception):
    """One attempt failed (internal): the message is marked failed and retried later."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def is_chart(message: OutboxMessage) -> bool:
    return message.kind is MessageKind.UPDATE and bool(message.payload.get("chart"))


def parent_ref(detail: IncidentDetail) -> tuple[str, str] | None:
    """(channel, ts) of the incident's Slack message, once delivered."""
    for m in sorted(detail.messages, key=lambda m: m.id):
        if (m.kind is MessageKind.POST and m.status is MessageStatus.DELIVERED
                and m.external_ref and REF_SEPARATOR in m.external_ref):
            channel, _, ts = m.external_ref.partition(REF_SEPARATOR)
            return channel, ts
    return None


def utilization_of(detail: IncidentDetail) -> Utilization:
    """The latest utilization evidence: a re-detection's metrics, the finding's, else the store's
    (each read as `StoredMetrics`: `StoredDocumentError` when one is malformed)."""
    candidates: list[StoredMetrics] = []
    for event in detail.events:
        metrics = event.detail.get("metrics")
        if isinstance(metrics, Mapping):
            candidates.append(StoredMetrics.from_stored(metrics, where=f"event {event.id}: metrics"))
    recorded = detail.stored.metrics
    if recorded is not None:
        candidates.insert(0, recorded)
    for metrics in reversed(candidates):
        now = metrics.utilization_now
        if now is not None:
            base = metrics.utilization_baseline
            return Utilization(float(now), float(base) if base is not None else None)
    return Utilization(detail.incident.utilization_before, None)


def waste_of(detail: IncidentDetail) -> StoredWaste | None:
    """The latest waste estimate: the finding's, with what later evidence estimated again (an
    event's `waste` replaces the figures it carries)."""
    waste = detail.stored.waste
    for event in sorted(detail.events, key=lambda e: e.id):
        again = event.detail.get("waste")
        if isinstance(again, Mapping) and waste is not None:
            waste = waste.revised(again, where=f"event {event.id}: waste")
    return waste


def proposed_fix(detail: IncidentDetail) -> ProposedFix | None:
    """The latest recorded plan or refusal (the preview before approval, then the executor's
    plan): its words, diff and preconditions, or why the fix cannot be applied."""
    return latest_fix(detail.actions)


def story_event(event: TimelineEvent, detail: IncidentDetail) -> TimelineEvent:
    """The event with what its remediation action recorded (the step, figures), the target
    zone and the incident's kind (`job_kind`: a generic group's steps read differently), for the
    thread reply."""
    action_id = event.detail.get("action_id")
    action = next((a for a in detail.actions if a.id == action_id), None)
    if action is None:
        return event
    merged: dict[str, Any] = {k: v for k, v in action.payload.items() if k != "plan"}
    merged.update(event.detail)
    if "step" in action.payload:
        merged["step"] = action.payload["step"]
    if detail.incident.target_zone:
        merged.setdefault("zone", detail.incident.target_zone)
    merged.setdefault("job_kind", detail.incident.kind)
    return dataclasses.replace(event, detail=merged)


def refused_reason(detail: IncidentDetail) -> str | None:
    """Why the incident's approved fix was refused (its latest `refused` event), or None."""
    for event in reversed(detail.events):
        if event.kind is EventKind.REFUSED:
            return str(event.detail.get("reason") or "") or None
    return None


class Follower:
    """Queues the thread replies and message refreshes an incident's timeline calls for.

    It remembers (in memory) the last event it queued per incident, so following again costs one
    read and queues only what is new; after a restart the dedupe keys make re-queuing harmless."""

    def __init__(
        self,
        store: ChatStore,
        *,
        clock: Clock,
        cluster: str | None = None,
        every: timedelta = timedelta(seconds=5),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.clock = clock
        self.cluster = cluster
        self.every = every.total_seconds()
        self.monotonic = monotonic
        self._followed: dict[int, int] = {}  # incident -> last event id queued
        self._next_round = 0.0
        self._lock = threading.Lock()

    def follow(self, incident_id: int) -> int:
        """Queue what is missing for one incident; how many messages were queued."""
        try:
            detail = self.store.get_incident(incident_id)
        except InputError:
            return 0
        posts = [m for m in detail.messages if m.kind is MessageKind.POST]
        if not posts:
            return 0  # never posted to chat: nothing to follow
        with self._lock:
            seen = self._followed.get(incident_id, 0)
        channel = posts[0].channel
        now = self.clock()
        queued = 0
        latest_refresh = None
        # the message shows the state it was rendered in: only what happened after its posting
        # (the `posted` event the store records with the delivery) calls for a refresh
        posted = min((e.id for e in detail.events if e.kind is EventKind.POSTED), default=None)
        newest = seen
        for event in detail.events:
            newest = max(newest, event.id)
            if event.id <= seen:
                continue
            if event.kind in THREAD_EVENTS:
                self.store.enqueue_message(
                    MessageKind.UPDATE, payload={"thread_event": event.id}, now=now,
                    incident_id=incident_id, channel=channel,
                    dedupe_key=f"slack:thread:{event.id}",
                )
                queued += 1
            if event.kind in REFRESH_EVENTS and posted is not None and event.id > posted:
                latest_refresh = event.id
        if latest_refresh is not None:
            self.store.enqueue_message(
                MessageKind.UPDATE, payload={"refresh": True}, now=now, incident_id=incident_id,
                channel=channel, dedupe_key=f"slack:refresh:{incident_id}:{latest_refresh}",
            )
            queued += 1
        if posted is not None:  # before the posting, refreshes are still to be decided
            with self._lock:
                self._followed[incident_id] = max(newest, self._followed.get(incident_id, 0))
        return queued

    def follow_recent(self, *, window: timedelta = timedelta(days=1)) -> None:
        """Every `every` at most: follow every open incident and every one updated within
        `window`."""
        if self.monotonic() < self._next_round:
            return
        self._next_round = self.monotonic() + self.every
        now = self.clock()
        seen: set[int] = set()
        for query in (IncidentQuery(cluster=self.cluster, open_only=True, limit=500),
                      IncidentQuery(cluster=self.cluster, limit=100)):
            for incident in self.store.list_incidents(query).incidents:
                if incident.id in seen or (not query.open_only and incident.updated_at < now - window):
                    continue
                seen.add(incident.id)
                self.follow(incident.id)


@dataclass
class DeliveryReport:
    delivered: int = 0
    failed: int = 0
    waiting: int = 0
    paused: bool = False


class Deliverer:
    """Drains the outbox into Slack (`run` is the leader's background job)."""

    def __init__(
        self,
        *,
        outbox: Outbox,
        store: ChatStore,
        client: WebClient,
        clock: Clock,
        approvals: Callable[[IncidentDetail], bool],
        follower: Follower | None = None,
        series: SeriesSource | None = None,
        default_channel: str | None = None,
        cluster: str | None = None,
        digest_period: timedelta = timedelta(days=1),
        chart_patience: timedelta = timedelta(minutes=10),
        batch: int = 20,
        rounds: int = 10,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.outbox = outbox
        self.store = store
        self.client = client
        self.clock = clock
        self.approvals = approvals
        self.follower = follower
        self.series = series
        self.default_channel = default_channel
        self.cluster = cluster
        self.digest_period = digest_period
        self.chart_patience = chart_patience
        self.batch = batch
        self.rounds = rounds
        self.monotonic = monotonic
        self._paused_until = 0.0

    def run(self) -> DeliveryReport:
        """One round: follow recent incidents, then deliver what is due. The store hands out one
        message per incident at a time (order per incident), so the round claims again after each
        batch, until nothing is due, Slack fails or the round has taken `rounds` batches."""
        report = DeliveryReport()
        if self.follower is not None:
            self.follower.follow_recent()
        for _ in range(self.rounds):
            if self.monotonic() < self._paused_until:
                report.paused = True
                return report
            claimed = self.outbox.claim(now=self.clock(), limit=self.batch)
            if not claimed:
                break
            failed_before = report.failed
            for claim in sorted(claimed, key=lambda c: c.message.id):
                self._one(claim, report)
            if report.failed > failed_before:
                break
        return report

    def _one(self, claim: ClaimedMessage, report: DeliveryReport) -> None:
        message = claim.message
        if self.monotonic() < self._paused_until:
            # rate limited meanwhile: no attempt; the claim's lease ends and it comes back
            report.waiting += 1
            report.paused = True
            return
        try:
            ref = self._deliver(message)
        except DeliveryError as exc:
            if exc.retry_after is not None:
                self._paused_until = self.monotonic() + exc.retry_after
            self.outbox.failed(claim, now=self.clock(), error=str(exc))
            report.failed += 1
            log.warning("slack delivery failed", extra={"message_id": message.id,
                                                        "error": str(exc)})
            return
        if self.outbox.delivered(claim, now=self.clock(), external_ref=ref):
            report.delivered += 1
        else:
            log.warning("a delivered message's claim had expired", extra={"message_id": message.id})

    # -- one message -----------------------------------------------------------------------------

    def _deliver(self, message: OutboxMessage) -> str | None:
        try:
            if message.kind is MessageKind.DIGEST:
                return self._digest(message)
            incident_id = message.incident_id
            if incident_id is None and is_chart(message):
                incident_id = int(message.payload.get("incident_id") or 0)
            if not incident_id:
                raise DeliveryError(f"a {message.kind.value} message without an incident")
            detail = self.store.get_incident(incident_id)
            if message.kind is MessageKind.POST:
                return self._post(message, detail)
            if message.payload.get("refresh"):
                return self._refresh(detail)
            if message.payload.get("chart"):
                return self._chart(detail)
            if "thread_event" in message.payload:
                return self._thread(message, detail)
            raise DeliveryError(f"unknown update payload {sorted(message.payload)}")
        except SlackApiError as exc:
            status = exc.response.status_code
            retry = None
            if status == 429:
                raw = exc.response.headers.get("Retry-After", "1")
                retry = float(raw) if str(raw).replace(".", "", 1).isdigit() else 1.0
            raise DeliveryError(f"slack answered {status}: {exc.response.get('error')}",
                                retry_after=retry) from None
        except (SlackClientError, OSError) as exc:
            raise DeliveryError(f"slack unreachable: {exc}") from None
        except ZonemedicError as exc:
            raise DeliveryError(f"store: {exc}") from None

    def _render(self, detail: IncidentDetail) -> Rendered:
        decision = max(detail.decisions, key=lambda d: (d.decided_at, d.id), default=None)
        return incident_message(
            detail.incident, detail.stored, fix=proposed_fix(detail),
            utilization=utilization_of(detail), approvals_enabled=self.approvals(detail),
            proposed=any(m.payload.get("action") == PROPOSE for m in detail.messages),
            decision=decision, snoozed_until=detail.snoozed_until, waste=waste_of(detail),
            refused=refused_reason(detail),
        )

    def _post(self, message: OutboxMessage, detail: IncidentDetail) -> str:
        rendered = self._render(detail)
        existing = parent_ref(detail)
        if existing is not None:
            self.client.chat_update(channel=existing[0], ts=existing[1], text=rendered.text,
                                    blocks=rendered.blocks)
            return REF_SEPARATOR.join(existing)
        channel = message.channel or self.default_channel
        if not channel:
            raise DeliveryError("no channel: set slack.channel or the playbook action's channel")
        response = self.client.chat_postMessage(channel=channel, text=rendered.text,
                                                blocks=rendered.blocks, unfurl_links=False)
        channel_id = str(response.get("channel") or channel)
        ts = str(response["ts"])
        if self.series is not None:
            # queued without its incident: a chart waiting for samples must not hold back the
            # incident's thread replies (the store keeps order only among an incident's messages)
            self.store.enqueue_message(
                MessageKind.UPDATE, payload={"chart": True, "incident_id": detail.incident.id},
                now=self.clock(), channel=channel_id,
                dedupe_key=f"slack:chart:{detail.incident.id}",
            )
        return f"{channel_id}{REF_SEPARATOR}{ts}"

    def _refresh(self, detail: IncidentDetail) -> str | None:
        existing = parent_ref(detail)
        if existing is None:
            return None  # never posted (its post is dead): nothing to update
        rendered = self._render(detail)
        self.client.chat_update(channel=existing[0], ts=existing[1], text=rendered.text,
                                blocks=rendered.blocks)
        return REF_SEPARATOR.join(existing)

    def _thread(self, message: OutboxMessage, detail: IncidentDetail) -> str | None:
        event_id = message.payload.get("thread_event")
        event = next((e for e in detail.events if e.id == event_id), None)
        rendered = thread_update(story_event(event, detail)) if event is not None else None
        existing = parent_ref(detail)
        if rendered is None or existing is None:
            return None
        response = self.client.chat_postMessage(channel=existing[0], thread_ts=existing[1],
                                                text=rendered.text, blocks=rendered.blocks)
        return f"{existing[0]}{REF_SEPARATOR}{response['ts']}"

    def _chart(self, detail: IncidentDetail) -> str | None:
        existing = parent_ref(detail)
        if existing is None or self.series is None:
            return None
        found = self.series(detail.incident)
        if found is None:
            if self.clock() - detail.incident.opened_at < self.chart_patience:
                raise DeliveryError("no utilization samples of the job yet")
            return None  # no metrics: no chart
        samples, baseline = found
        onset = detail.onset_at or detail.incident.opened_at
        incident = detail.incident
        png = utilization_png(samples, title=f"GPU utilization of {incident.namespace}/"
                              f"{incident.name}", split_at=onset.timestamp(), baseline=baseline)
        if png is None:
            return None
        response = self.client.files_upload_v2(
            content=png, filename=f"zonemedic-{incident.id}-utilization.png",
            title=f"GPU utilization, incident #{incident.id}", channel=existing[0],
            thread_ts=existing[1],
        )
        file = response.get("file") or {}
        return str(file.get("id") or "uploaded")

    def _digest(self, message: OutboxMessage) -> str:
        channel = message.channel or self.default_channel
        if not channel:
            raise DeliveryError("no channel for the digest")
        now = self.clock()
        stats = self.store.stats(since=now - self.digest_period, now=now)
        open_now = self.store.list_incidents(
            IncidentQuery(cluster=self.cluster, open_only=True, limit=200)
        ).incidents
        not_posted = message.payload.get("not_posted")
        admissions = self.store.admission_summary(since=now - ADMISSION_WINDOW, now=now)
        rendered = digest_message(open_now, stats, period=self.digest_period,
                                  not_posted=not_posted if isinstance(not_posted, dict) else None,
                                  admissions=admissions)  # fmt: skip
        response = self.client.chat_postMessage(channel=channel, text=rendered.text,
                                                blocks=rendered.blocks)
        return f"{response.get('channel') or channel}{REF_SEPARATOR}{response['ts']}"
