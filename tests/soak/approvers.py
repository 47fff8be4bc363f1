"""The soak's people in Slack: for each finding posted with buttons, a random behaviour (seeded):
an approver approves once; or clicks twice while another approver clicks too; or a non-approver
clicks first and an approver later; or an approver approves late; or rejects; or nobody clicks.
Some incidents get a late click again after they ended. Clicks are signed requests to a random
live replica (the Service in front of the agents); a replica that is gone is tried on another.
An approver whose approval was not recorded (the database was down, "try again") clicks again.
Every click and its HTTP answer is recorded.
"""

from __future__ import annotations

import heapq
import itertools
import random
import threading
import time
from dataclasses import dataclass, field

import httpx

from agent.chatops.blocks import ButtonAction
from agent.chatops.slack import EVENTS_PATH
from agent.errors import ZonemedicError
from agent.model.lifecycle import IncidentStatus
from agent.store.repository import IncidentStore
from tests.soak.rig import APPROVERS, CHANNEL, NOT_APPROVER, Rig

APPROVE, REJECT = ButtonAction.APPROVE.value, ButtonAction.REJECT.value
RETRY_AFTER = 6.0  # an approver looks again this long after a click that changed nothing


@dataclass(frozen=True)
class Click:
    at: float
    user: str
    action: str
    incident: int
    status: int  # HTTP answer of the agent; 0: no replica answered


@dataclass
class Approvers:
    rig: Rig
    rng: random.Random
    store: IncidentStore
    clicks: list[Click] = field(default_factory=list)
    seen: set[int] = field(default_factory=set)
    behaviours: dict[int, str] = field(default_factory=dict)
    retried: int = 0
    _queue: list[tuple[float, int, str, str, int]] = field(default_factory=list)
    _order: itertools.count[int] = field(default_factory=itertools.count)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _last_try: dict[int, float] = field(default_factory=dict)

    def _plan(self, at: float, user: str, action: str, incident: int) -> None:
        heapq.heappush(self._queue, (at, next(self._order), user, action, incident))

    def look(self) -> None:
        """Read the channel; plan clicks for new findings; click what is due; retry approvals
        that changed nothing."""
        now = time.monotonic()
        for message in self.rig.slack.messages():
            if message.thread_ts is not None or message.channel != CHANNEL:
                continue
            for block in message.blocks:
                if block.get("type") != "actions":
                    continue
                incident = int(block["elements"][0]["value"])
                if incident not in self.seen:
                    self.seen.add(incident)
                    self._behave(incident, now)
        while self._queue and self._queue[0][0] <= now:
            _, _, user, action, incident = heapq.heappop(self._queue)
            self.click(user, action, incident)
        self._retry(now)

    def _behave(self, incident: int, now: float) -> None:
        rng = self.rng
        roll = rng.random()
        u1, u2 = APPROVERS
        if roll < 0.5:
            kind = "once"
            self._plan(now + rng.uniform(0.2, 2), u1, APPROVE, incident)
        elif roll < 0.65:
            kind = "twice_and_another"
            t = now + rng.uniform(0.2, 2)
            self._plan(t, u1, APPROVE, incident)
            self._plan(t + 0.01, u1, APPROVE, incident)
            self._plan(t + 0.02, u2, APPROVE, incident)
        elif roll < 0.75:
            kind = "not_approver_first"
            t = now + rng.uniform(0.2, 2)
            self._plan(t, NOT_APPROVER, APPROVE, incident)
            self._plan(t + rng.uniform(1, 3), u2, APPROVE, incident)
        elif roll < 0.85:
            kind = "late"
            self._plan(now + rng.uniform(5, 15), u1, APPROVE, incident)
        elif roll < 0.92:
            kind = "reject"
            self._plan(now + rng.uniform(0.2, 2), u2, REJECT, incident)
        else:
            kind = "nobody"
        if kind != "nobody" and rng.random() < 0.3:  # a click long after, on whatever it became
            self._plan(now + rng.uniform(20, 40), rng.choice(APPROVERS), APPROVE, incident)
        self.behaviours[incident] = kind

    def click(self, user: str, action: str, incident: int) -> Click:
        replicas = self.rig.live()
        self.rng.shuffle(replicas)
        status = 0
        for replica in replicas:
            body = self.rig.slack.action_body(user=user, action_id=action, value=str(incident))
            try:
                status = self.rig.slack.post(replica.url + EVENTS_PATH, body,
                                             self.rig.slack.signed_headers(body), timeout=5).status
            except (OSError, httpx.HTTPError):
                continue
            break
        click = Click(time.time(), user, action, incident, status)
        with self._lock:
            self.clicks.append(click)
        self._last_try[incident] = time.monotonic()
        return click

    def _retry(self, now: float) -> None:
        wanted = {c.incident: c for c in self.clicks if c.user in APPROVERS}
        for incident, last in wanted.items():
            if now - self._last_try.get(incident, 0) < RETRY_AFTER:
                continue
            try:
                status = self.store.get_incident(incident).incident.status
            except ZonemedicError:
                continue  # the database is down: look again later
            if status is IncidentStatus.AWAITING_APPROVAL:
                self.retried += 1
                self.click(last.user, last.action, incident)

    def pending(self) -> int:
        return len(self._queue)
