"""Sweep scheduling: UTC cron with crontab weekdays, coalesce/misfire defaults, leader gating."""

from __future__ import annotations

import logging
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


@pytest.mark.parametrize(
    ("expr", "now", "window", "expected"),
    [
        ("0 8 * * *", datetime(2026, 11, 28, 8, 3, tzinfo=UTC), timedelta(minutes=5), datetime(2026, 11, 28, 8, 0, tzinfo=UTC)),
        ("0 8 * * *", datetime(2026, 11, 28, 8, 6, tzinfo=UTC), timedelta(minutes=5), None),  # beyond the grace
        ("*/15 * * * *", datetime(2026, 11, 28, 12, 31, tzinfo=UTC), timedelta(hours=1), datetime(2026, 11, 28, 12, 30, tzinfo=UTC)),
    ],
)
def test_last_fire_time(expr: str, now: datetime, window: timedelta, expected: datetime | None) -> None:
    from agent.runtime.scheduler import last_fire_time

    assert last_fire_time(cron_trigger(expr), now, window=window) == expected


def test_ledger_skips_a_run_a_previous_leader_did_and_runs_one_it_missed() -> None:
    from agent.runtime.scheduler import decode_ledger, encode_ledger

    ran: list[str] = []
    persisted: list[dict[str, datetime]] = []
    playbook = _playbook("0 8 * * *")
    sched = SweepScheduler([playbook], run_sweep=lambda p, e: ran.append(e), is_leader=lambda: True, on_ran=persisted.append)
    job_id = "sweep:digest:0 8 * * *"
    at = datetime(2026, 11, 28, 8, 2, tzinfo=UTC)
    sched.load_ledger(decode_ledger(encode_ledger({job_id: datetime(2026, 11, 28, 8, 0, tzinfo=UTC)})))
    sched._guarded(playbook, "0 8 * * *", now=at)
    assert ran == [] and sched.already_done == 1
    sched.ledger.clear()
    sched.load_ledger({job_id: datetime(2026, 11, 27, 8, 0, tzinfo=UTC)})  # yesterday's only: crashed before today's
    sched._guarded(playbook, "0 8 * * *", now=at)
    assert ran == ["0 8 * * *"]
    assert persisted[-1] == {job_id: datetime(2026, 11, 28, 8, 0, tzinfo=UTC)}
    assert decode_ledger("not json") == {} and decode_ledger(None) == {}


def _ended(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if str(r.msg).startswith("scheduled job ended")]


def test_a_long_run_overlapping_its_next_runs_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    from apscheduler.triggers.interval import IntervalTrigger

    from tests.support.waiting import wait

    release = threading.Event()
    runs: list[int] = []

    def long_job() -> None:  # a remediation holding the executor's pickup
        runs.append(1)
        release.wait(20)

    sched = SweepScheduler([], run_sweep=lambda p, e: None, is_leader=lambda: True,
                           extra_jobs=[("remediation-executor", IntervalTrigger(seconds=0.05), long_job)])
    caplog.set_level("INFO")
    sched.start()
    sched.resume()
    try:
        for episode in (1, 2):
            release.clear()
            skipped_before = sched.overlap_skips
            wait(lambda before=skipped_before: sched.overlap_skips >= before + 5, timeout=20,
                 what="runs skipped while the long one runs")
            release.set()
            wait(lambda n=episode: len(_ended(caplog)) == n, timeout=20, what="the end of the overlap")
            assert sched.overlaps == episode
    finally:
        release.set()
        sched.shutdown(wait=True)
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "maximum number of running instances" in m]
    starts = [r for r in caplog.records if r.msg.startswith("scheduled job still running")]
    ends = _ended(caplog)
    assert [r.__dict__["job"] for r in starts] == ["remediation-executor"] * 2  # once per overlap
    assert len(ends) == 2 and all(r.__dict__["skipped_runs"] >= 5 for r in ends)
    assert sum(r.__dict__["skipped_runs"] for r in ends) == sched.overlap_skips
