"""APScheduler 3.x wiring: the playbooks' schedules run sweeps, on the leader only.

Called by the composition root. One `BackgroundScheduler` per process on an in-memory job store
(never two schedulers on one store), `timezone=UTC`, `coalesce=True` (missed runs collapse into
one), a real `misfire_grace_time`, and `max_instances=1`. It starts paused; the leader elector
resumes it on gaining the lease and pauses it on losing it, and every run re-checks
`is_leader()` first, so a replica that lost the lease mid-way never starts a sweep. Cron fields come
from `agent.playbook.cron` (crontab weekday numbering, not APScheduler's). What it does not do:
sweep (the callback does).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger

from agent.playbook.cron import parse_cron
from agent.playbook.model import Playbook

log = logging.getLogger(__name__)


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
    ) -> None:
        self.is_leader = is_leader
        self.run_sweep = run_sweep
        self.skipped = 0
        self.scheduler = BackgroundScheduler(
            timezone=UTC,
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
                self.scheduler.add_job(
                    self._guarded,
                    trigger=cron_trigger(expr),
                    args=(playbook, expr),
                    id=f"sweep:{playbook.name}:{expr}",
                    name=f"{playbook.name} ({expr} UTC)",
                    replace_existing=True,
                )
        for job_id, trigger, fn in extra_jobs:
            self.scheduler.add_job(self._guarded_call, trigger=trigger, args=(fn,), id=job_id)

    def _guarded(self, playbook: Playbook, expr: str) -> None:
        if not self.is_leader():
            self.skipped += 1
            log.info("not the leader: sweep skipped", extra={"playbook": playbook.name})
            return
        try:
            self.run_sweep(playbook, expr)
        except Exception:  # top-level of a scheduled job: log, the next run will retry
            log.exception("sweep failed", extra={"playbook": playbook.name})

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
