"""The Alertmanager webhook's handling: parse, dedupe, map to jobs, hand to the pipeline.

Called by the HTTP app (`POST /alertmanager`), which turns the returned `AlertOutcome` into the HTTP
answer: 200 when accepted (duplicates included: Alertmanager must not retry them), 400 with the
reason for a body we cannot use (retrying would not help), 503 when a retry can succeed: the cache
is not synced yet, the agent is shutting down, or the incident store cannot take the alert now
(`on_alert` raised `UnavailableError`; the pipeline bounds its store calls so that this answer
comes within a few seconds). Alertmanager retries a 503 with the whole group.

Nothing is lost: an alert is remembered as seen only once `on_alert` has stored it, so a re-send
of an alert whose storing failed is handled again, and a re-send of a stored one is a duplicate.
Alerts of one body before the failing one are stored and remembered (their re-sends are
duplicates). Two requests carrying the same alert at once (an Alertmanager HA pair) do not both
store it: the second waits (at most `wait` seconds) for the first, then counts a duplicate, or
stores it itself if the first failed, or answers 503 if the first is still busy.

Parsing and mapping are the pure `agent.sources.alertmanager`; this class only adds the lock, the
dedupe memory, the cache lookups and the hand-off. What it does not do: record anything itself.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from agent.errors import UnavailableError
from agent.model.job import JobRef
from agent.sources.alertmanager import (
    Alert,
    Deduper,
    PayloadError,
    parse_webhook,
    resolve_jobs,
    target_of,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AlertOutcome:
    status: int
    body: dict[str, object] = field(default_factory=dict)


class _Claim(Enum):
    MINE = "mine"  # this request stores the alert
    DUPLICATE = "duplicate"  # stored already
    BUSY = "busy"  # another request is still storing it


class AlertReceiver:
    def __init__(
        self,
        *,
        jobs_named: Callable[[str, str], list[JobRef]],
        job_of_pod: Callable[[str, str], JobRef | None],
        ready: Callable[[], bool],
        on_alert: Callable[[Alert, list[JobRef]], bool],
        on_outcome: Callable[[str], None] = lambda outcome: None,
        capacity: int = 10_000,
        wait: float = 5.0,
    ) -> None:
        self.jobs_named = jobs_named
        self.job_of_pod = job_of_pod
        self.ready = ready
        self.on_alert = on_alert
        self.on_outcome = on_outcome
        self.wait = wait
        self._dedupe = Deduper(capacity)
        self._storing: set[tuple[str, str, str]] = set()
        self.waiting = 0  # requests waiting for another request to store the same alert
        self._cond = threading.Condition()

    def handle(self, body: bytes) -> AlertOutcome:
        try:
            hook = parse_webhook(body)
        except PayloadError as exc:
            return AlertOutcome(400, {"error": str(exc)})
        if not self.ready():
            return AlertOutcome(503, {"error": "caches are not synced yet; retry later"})
        accepted = duplicates = unmapped = 0
        jobs_out: list[str] = []
        for alert in hook.alerts:
            claim = self._claim(alert)
            if claim is _Claim.DUPLICATE:
                duplicates += 1
                self.on_outcome("duplicate")
                continue
            if claim is _Claim.BUSY:
                return AlertOutcome(
                    503, {"error": f"alert {alert.name} is being stored by another request; retry later"}
                )
            try:
                target = target_of(alert)
                jobs = (
                    resolve_jobs(target, jobs_named=self.jobs_named, job_of_pod=self.job_of_pod)
                    if target is not None
                    else []
                )
                try:
                    taken = self.on_alert(alert, jobs)
                except UnavailableError as exc:
                    log.warning(
                        "alert not stored, answering 503 (Alertmanager retries)",
                        extra={"alert": alert.name, "reason": str(exc)},
                    )
                    self.on_outcome("unavailable")
                    return AlertOutcome(
                        503, {"error": "the incident store cannot take alerts now; retry later"}
                    )
                if not taken:
                    return AlertOutcome(503, {"error": "the agent is shutting down; retry later"})
                with self._cond:
                    self._dedupe.remember(alert)
            finally:
                self._release(alert)
            if jobs:
                accepted += 1
                jobs_out.extend(str(j) for j in jobs)
                self.on_outcome("new")
            else:
                unmapped += 1
                self.on_outcome("unmapped")
        log.info(
            "alertmanager webhook",
            extra={"accepted": accepted, "duplicates": duplicates, "unmapped": unmapped},
        )
        return AlertOutcome(
            200,
            {
                "accepted": accepted,
                "duplicates": duplicates,
                "unmapped": unmapped,
                "jobs": sorted(set(jobs_out)),
            },
        )

    def _claim(self, alert: Alert) -> _Claim:
        key = alert.dedupe_key
        give_up = time.monotonic() + self.wait
        with self._cond:
            while True:
                if self._dedupe.seen(alert):
                    return _Claim.DUPLICATE
                if key not in self._storing:
                    self._storing.add(key)
                    return _Claim.MINE
                left = give_up - time.monotonic()
                if left <= 0:
                    return _Claim.BUSY
                self.waiting += 1
                try:
                    self._cond.wait(left)
                finally:
                    self.waiting -= 1

    def _release(self, alert: Alert) -> None:
        with self._cond:
            self._storing.discard(alert.dedupe_key)
            self._cond.notify_all()
