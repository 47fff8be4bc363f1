"""The Alertmanager webhook's handling: parse, dedupe, map to jobs, hand to the detector.

Called by the HTTP app (`POST /alertmanager`), which turns the returned `AlertOutcome` into the HTTP
answer: 200 when accepted (duplicates included: Alertmanager must not retry them), 400 with the
reason for a body we cannot use (retrying would not help), 503 only when a retry can succeed (the
cache is not synced yet, or the detector refused the work because it is shutting down). Parsing and
mapping are the pure `agent.sources.alertmanager`; this class only adds the lock, the dedupe
memory, the cache lookups and the hand-off.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from agent.sources.alertmanager import (
    Alert,
    Deduper,
    PayloadError,
    parse_webhook,
    resolve_jobs,
    target_of,
)
from agent.sources.jobkey import JobKey

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AlertOutcome:
    status: int
    body: dict[str, object] = field(default_factory=dict)


class AlertReceiver:
    def __init__(
        self,
        *,
        jobs_named: Callable[[str, str], list[JobKey]],
        job_of_pod: Callable[[str, str], JobKey | None],
        ready: Callable[[], bool],
        on_alert: Callable[[Alert, list[JobKey]], bool],
        on_outcome: Callable[[str], None] = lambda outcome: None,
        capacity: int = 10_000,
    ) -> None:
        self.jobs_named = jobs_named
        self.job_of_pod = job_of_pod
        self.ready = ready
        self.on_alert = on_alert
        self.on_outcome = on_outcome
        self._dedupe = Deduper(capacity)
        self._lock = threading.Lock()

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
            with self._lock:
                first = self._dedupe.first_time(alert)
            if not first:
                duplicates += 1
                self.on_outcome("duplicate")
                continue
            target = target_of(alert)
            jobs = (
                resolve_jobs(target, jobs_named=self.jobs_named, job_of_pod=self.job_of_pod)
                if target is not None
                else []
            )
            if not self.on_alert(alert, jobs):
                with self._lock:
                    self._dedupe.forget(alert)
                return AlertOutcome(503, {"error": "the agent is shutting down; retry later"})
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
