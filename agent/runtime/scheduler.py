"""APScheduler 3.x wiring: the playbooks' schedules run sweeps, on the leader only.

Called by the composition root. One `BackgroundScheduler` per process on an in-memory job store
(never two schedulers on one store), `timezone=UTC`, `coalesce=True` (missed runs collapse into
one), a real `misfire_grace_time`, and `max_instances=1`. It starts paused; the leader elector
resumes it on gaining the lease and pauses it on losing it, and every run re-checks
`is_leader()` first, so a replica that lost the lease mid-way never starts a sweep. Cron fields come
from `agent.playbook.cron` (crontab weekday numbering, not APScheduler's).

No sweep runs twice across a hand-over: each run records its schedule time in a ledger that the
leader writes on its Lease (`LEDGER_ANNOTATION`, through the elector's next renewal); a new leader
loads it before resuming, so a run its paused scheduler still holds as due (within the misfire
grace) is skipped when the previous leader already did it, and run when it did not (a crash).
A scheduled job still running when its next run is due (a remediation holds the executor's
pickup for minutes) is expected: APScheduler's own warning for each skipped run ("maximum number
of running instances reached", every second) is dropped, and the overlap is logged once when it
starts and once when the long run ends, with how many runs it skipped (`overlaps`: episodes so
far, `overlap_skips`: runs skipped). What it does not do: sweep (the callback does).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.events import (
    EVENT_JOB_ERROR,
    EVENT_JOB_EXECUTED,
    EVENT_JOB_MAX_INSTANCES,
    JobEvent,
)
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger

from agent.playbook.cron import parse_cron
from agent.playbook.model import Playbook

log = logging.getLogger(__name__)

LEDGER_ANNOTATION = "zonemedic.io/sweeps-done"
# APScheduler's own log lines, under `apscheduler` (its level and handlers apply) but apart, so the
# filter below touches our schedulers only.
APSCHEDULER_LOG = "apscheduler.scheduler.zonemedic"
_SKIPPED_RUN = "maximum number of running instances reached"


class SkippedRunFilter(logging.Filter):
    """Drops APScheduler's warning for a run skipped because the previous one still runs (the
    scheduler logs the overlap itself, once)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return _SKIPPED_RUN not in str(record.msg)


def _apscheduler_logger() -> logging.Logger:
    logger = logging.getLogger(APSCHEDULER_LOG)
    if not any(isinstance(f, SkippedRunFilter) for f in logger.filters):
        logger.addFilter(SkippedRunFilter())
    return logger


def last_fire_time(trigger: CronTrigger, now: datetime, *, window: timedelta) -> datetime | None:
    """The latest fire time of `trigger` in `(now - window, now]` (None when there is none)."""
    fire = trigger.get_next_fire_time(None, now - window)
    last = None
    while fire is not None and fire <= now:
        last = fire
        fire = trigger.get_next_fire_time(fire, fire + timedelta(seconds=1))
    return last


def encode_ledger(ledger: dict[str, datetime]) -> str:
    return json.dumps({k: v.isoformat() for k, v in sorted(ledger.items())})


def decode_ledger(text: str | None) -> dict[str, datetime]:
    """The ledger from a Lease annotation; anything unreadable is ignored (worst case: a sweep
    runs again after a hand-over)."""
    if not text:
        return {}
    try:
        raw = json.loads(text)
        return {str(k): datetime.fromisoformat(str(v)) for k, v in raw.items()}
    except (ValueError, AttributeError, TypeError):
        return {}


def cron_trigger(expr: str) -> CronTrigger:
    spec = parse_cron(expr)
    return CronTrigger(
        minute=spec.minute,
        hour=spec.hour,
        day=spec.day,
        month=spec.month,
        day_of_week=spec.day_of_week,
        timezone=UTC,
    )


class SweepScheduler:
    def __init__(
        self,
        playbooks: Iterable[Playbook],
        *,
        run_sweep: Callable[[Playbook, str], None],
        is_leader: Callable[[], bool],
        misfire_grace: timedelta = timedelta(minutes=5),
        extra_jobs: Iterable[tuple[str, Any, Callable[[], None]]] = (),
        on_ran: Callable[[dict[str, datetime]], None] = lambda ledger: None,
    ) -> None:
        self.is_leader = is_leader
        self.run_sweep = run_sweep
        self.on_ran = on_ran
        self.misfire_grace = misfire_grace
        self.skipped = 0
        self.already_done = 0
        self.ledger: dict[str, datetime] = {}
        self.triggers: dict[str, CronTrigger] = {}
        self._ledger_lock = threading.Lock()
        self.overlaps = 0
        self.overlap_skips = 0
        self._overlapping: dict[str, int] = {}  # job id -> runs skipped in the current overlap
        self._overlap_lock = threading.Lock()
        self.scheduler = BackgroundScheduler(
            timezone=UTC,
            logger=_apscheduler_logger(),
            job_defaults={
                "coalesce": True,
                "misfire_grace_time": int(misfire_grace.total_seconds()),
                "max_instances": 1,
            },
        )
        for playbook in playbooks:
            if not playbook.enabled:
                continue
            for expr in playbook.schedules():
                job_id = f"sweep:{playbook.name}:{expr}"
                self.triggers[job_id] = cron_trigger(expr)
                self.scheduler.add_job(
                    self._guarded,
                    trigger=self.triggers[job_id],
                    args=(playbook, expr),
                    id=job_id,
                    name=f"{playbook.name} ({expr} UTC)",
                    replace_existing=True,
                )
        for job_id, trigger, fn in extra_jobs:
            self.scheduler.add_job(self._guarded_call, trigger=trigger, args=(fn,), id=job_id)
        self.scheduler.add_listener(
            self._on_job_event, EVENT_JOB_MAX_INSTANCES | EVENT_JOB_EXECUTED | EVENT_JOB_ERROR
        )

    def _on_job_event(self, event: JobEvent) -> None:
        """One log line when a job's run starts overlapping the next, one when it ends."""
        with self._overlap_lock:
            if event.code == EVENT_JOB_MAX_INSTANCES:
                self.overlap_skips += 1
                skipped = self._overlapping.get(event.job_id, 0) + 1
                self._overlapping[event.job_id] = skipped
                if skipped > 1:
                    return
                self.overlaps += 1
            else:
                skipped = self._overlapping.pop(event.job_id, 0)
                if not skipped:
                    return
        if event.code == EVENT_JOB_MAX_INSTANCES:
            log.info("scheduled job still running when due again: its runs are skipped until "
                     "it ends", extra={"job": event.job_id})
        else:
            log.info("scheduled job ended; runs skipped while it ran",
                     extra={"job": event.job_id, "skipped_runs": skipped})

    def load_ledger(self, ledger: dict[str, datetime]) -> None:
        """On gaining leadership: which scheduled runs a previous leader already did."""
        with self._ledger_lock:
            for job_id, due in ledger.items():
                if job_id not in self.ledger or self.ledger[job_id] < due:
                    self.ledger[job_id] = due

    def _guarded(self, playbook: Playbook, expr: str, now: datetime | None = None) -> None:
        if not self.is_leader():
            self.skipped += 1
            log.info("not the leader: sweep skipped", extra={"playbook": playbook.name})
            return
        job_id = f"sweep:{playbook.name}:{expr}"
        now = now or datetime.now(UTC)
        due = last_fire_time(self.triggers[job_id], now, window=self.misfire_grace) or now
        with self._ledger_lock:
            done = self.ledger.get(job_id)
            if done is not None and done >= due:
                self.already_done += 1
                log.info(
                    "sweep already run for this schedule time",
                    extra={"playbook": playbook.name, "due": due.isoformat()},
                )
                return
            self.ledger[job_id] = due
            snapshot = dict(self.ledger)
        try:
            self.run_sweep(playbook, expr)
        except Exception:  # top-level of a scheduled job: log, the next run will retry
            log.exception("sweep failed", extra={"playbook": playbook.name})
        self.on_ran(snapshot)

    def _guarded_call(self, fn: Callable[[], None]) -> None:
        if not self.is_leader():
            self.skipped += 1
            return
        try:
            fn()
        except Exception:  # top-level of a scheduled job
            log.exception("scheduled job failed")

    def jobs(self) -> list[tuple[str, datetime | None]]:
        return [(job.id, getattr(job, "next_run_time", None)) for job in self.scheduler.get_jobs()]

    def start(self) -> None:
        self.scheduler.start(paused=True)

    def resume(self) -> None:
        """Called on gaining leadership."""
        if self.scheduler.running:
            self.scheduler.resume()

    def pause(self) -> None:
        """Called on losing leadership."""
        if self.scheduler.running:
            self.scheduler.pause()

    def run_now(self, job_id: str) -> None:
        """Make one job due now (for `sweep` triggers from tests and operators)."""
        self.scheduler.modify_job(job_id, next_run_time=datetime.now(UTC))

    def shutdown(self, *, wait: bool = True) -> None:
        if self.scheduler.running:
            self.scheduler.shutdown(wait=wait)
