"""Sweep scheduling: UTC cron with crontab weekdays, coalesce/misfire defaults, leader gating."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent.playbook.model import Playbook
from agent.playbook.schema import parse_playbook
from agent.runtime.scheduler import SweepScheduler, cron_trigger


def _playbook(cron: str) -> Playbook:
    text = f"name: digest\ntriggers:\n  - type: schedule\n    cron: '{cron}'\nactions: [{{type: digest}}]\n"
    return parse_playbook(text, path=Path("digest.yaml"))


@pytest.mark.parametrize(
    ("expr", "after", "expected"),
    [
        ("0 8 * * 1-5", datetime(2026, 11, 28, 12, tzinfo=UTC), datetime(2026, 11, 30, 8, tzinfo=UTC)),  # Sat -> Mon
        ("0 8 * * 0", datetime(2026, 11, 28, 12, tzinfo=UTC), datetime(2026, 11, 29, 8, tzinfo=UTC)),  # crontab 0 = Sunday
        ("*/15 * * * *", datetime(2026, 11, 28, 12, 1, tzinfo=UTC), datetime(2026, 11, 28, 12, 15, tzinfo=UTC)),
        ("@daily", datetime(2026, 11, 28, 12, tzinfo=UTC), datetime(2026, 11, 29, 0, tzinfo=UTC)),
    ],
)
def test_cron_trigger_in_utc(expr: str, after: datetime, expected: datetime) -> None:
    assert cron_trigger(expr).get_next_fire_time(None, after) == expected


def test_job_defaults_and_leader_gating() -> None:
    ran = threading.Event()
    leader = {"now": False}
    calls: list[str] = []

    def sweep(playbook: Playbook, expr: str) -> None:
        calls.append(f"{playbook.name}:{expr}")
        ran.set()

    sched = SweepScheduler([_playbook("0 8 * * *")], run_sweep=sweep, is_leader=lambda: leader["now"], misfire_grace=timedelta(minutes=7))
    sched.start()
    try:
        (job,) = sched.scheduler.get_jobs()
        assert job.coalesce is True and job.misfire_grace_time == 420 and job.max_instances == 1
        assert str(job.trigger.timezone) == "UTC"
        # a follower's guard refuses even if the job fires
        sched.resume()
        sched._guarded(_playbook("0 8 * * *"), "0 8 * * *")
        assert calls == [] and sched.skipped == 1
        leader["now"] = True
        sched.run_now(job.id)
        assert ran.wait(10)
        assert calls == ["digest:0 8 * * *"]
    finally:
        sched.shutdown()


def test_failing_sweep_is_logged_not_raised() -> None:
    def boom(playbook: Playbook, expr: str) -> None:
        raise RuntimeError("database away")

    sched = SweepScheduler([_playbook("0 8 * * *")], run_sweep=boom, is_leader=lambda: True)
    sched._guarded(_playbook("0 8 * * *"), "0 8 * * *")  # does not raise
    assert sched.skipped == 0
