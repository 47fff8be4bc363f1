"""Two agents in one process against one twin and one database: a scheduled sweep runs on the
leader only (the follower's scheduler is paused and its guard refuses), and a hand-over does not
run it again: the new leader reads the sweep ledger the old one wrote on the Lease. Only the leader
records detector batches; the new leader catches up with one full diagnosis on acquiring the lease.
A background job handed to the composition root (`Injected.background_jobs`) runs on the leader only, and on the
new leader after a hand-over."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import pytest
from apscheduler.schedulers.base import STATE_PAUSED

from agent.rig.rig import AgentRig
from agent.runtime.app import Agent
from agent.runtime.background import BackgroundJob
from agent.runtime.root import Injected
from agent.runtime.scheduler import LEDGER_ANNOTATION
from tests.support.agent_rig import agent_settings
from tests.support.waiting import wait
from tests.twin import twin_fixtures as fixtures

JOB_ID = "sweep:sweep:* * * * *"
SWEEP_EVERY_MINUTE = "name: sweep\ntriggers:\n  - type: schedule\n    cron: '* * * * *'\nactions: [{type: digest}]\n"


def findings(agent: Agent) -> float:
    """Findings this replica's pipeline recorded (zonemedic_findings_total over all verdicts)."""
    return sum(
        sample.value
        for metric in agent.metrics.registry.collect()
        for sample in metric.samples
        if sample.name == "zonemedic_findings_total"
    )


def sweeps(agent: Agent) -> float:
    return agent.metrics.registry.get_sample_value("zonemedic_sweeps_total", {"outcome": "ok"}) or 0.0


class Beats:
    """The runs of one background job, per replica identity."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: dict[str, int] = {"a": 0, "b": 0}

    def beat(self, identity: str) -> None:
        with self.lock:
            self.runs[identity] += 1

    def of(self, agent: Agent) -> int:
        with self.lock:
            return self.runs[agent.identity]


@pytest.fixture
def beats() -> Beats:
    return Beats()


@pytest.fixture
def agents(tmp_path: Path, beats: Beats) -> Iterator[tuple[Agent, Agent]]:
    books = tmp_path / "books"
    books.mkdir()
    (books / "sweep.yaml").write_text(SWEEP_EVERY_MINUTE)
    with AgentRig(tmp_path) as rig:
        rig.start_twin(fixtures.fast("seed-degraded"))
        settings = replace(agent_settings(tmp_path, rig.kubeconfig, None), playbooks_dir=str(books))
        started: list[Agent] = []
        for name in ("a", "b"):
            heartbeat = BackgroundJob("heartbeat", every=timedelta(milliseconds=100),
                                      run=partial(beats.beat, name))
            injected = Injected(background_jobs=(heartbeat,))
            started.append(rig.start_agent(settings, injected=injected, identity=name).agent)
        yield started[0], started[1]


def paused(agent: Agent) -> bool:
    return bool(agent.scheduler.scheduler.state == STATE_PAUSED)


def _fire_now(agent: Agent) -> None:
    agent.scheduler.scheduler.modify_job(JOB_ID, next_run_time=datetime.now(UTC))
    agent.scheduler.scheduler.wakeup()


def test_a_scheduled_sweep_runs_once_across_replicas_and_a_hand_over(agents: tuple[Agent, Agent]) -> None:
    a, b = agents
    # both fire times in one minute
    wait(lambda: datetime.now(UTC).second <= 45, timeout=20, what="the first 45 s of a minute")
    wait(lambda: a.elector.is_leader() or b.elector.is_leader(), timeout=30, what="a leader")
    leader, follower = (a, b) if a.elector.is_leader() else (b, a)
    # the leader recorded its start-up (or catch-up) batch
    wait(lambda: findings(leader) > 0, timeout=30, what="the leader's first findings")
    for agent in (a, b):  # the schedule fires on both replicas
        _fire_now(agent)
    wait(lambda: sweeps(leader) == 1, timeout=30, what="the leader's sweep")
    # the follower's scheduler is paused: its fired run stays due and unprocessed (the hand-over
    # below shows it was held, not run)
    assert not follower.elector.is_leader() and paused(follower)
    assert (sweeps(leader), sweeps(follower)) == (1, 0)
    assert findings(follower) == 0  # a follower records no detector batch
    assert follower.scheduler.skipped + follower.scheduler.already_done == 0  # paused: not even tried
    wait(lambda: LEDGER_ANNOTATION in leader.elector.annotations(), timeout=30,
         what="the sweep ledger on the Lease")
    leader.stop()  # graceful: the ledger is on the Lease, the lease released
    wait(follower.elector.is_leader, timeout=30, what="the follower to lead")
    # the new leader catches up: one full diagnosis, recorded
    wait(lambda: findings(follower) > 0, timeout=30, what="the new leader's findings")
    # the follower's paused scheduler still holds this minute's run as due: resuming must skip it
    wait(lambda: follower.scheduler.already_done >= 1, timeout=30, what="the held run skipped")
    _fire_now(follower)  # and firing it again for the same schedule time does nothing either
    wait(lambda: follower.scheduler.already_done >= 2, timeout=30, what="the fired run skipped")
    assert (sweeps(leader), sweeps(follower)) == (1, 0)


def test_a_background_job_runs_on_the_leader_only_then_on_the_new_leader(
    agents: tuple[Agent, Agent], beats: Beats
) -> None:
    a, b = agents
    wait(lambda: a.elector.is_leader() or b.elector.is_leader(), timeout=30, what="a leader")
    leader, follower = (a, b) if a.elector.is_leader() else (b, a)
    # every 100 ms on the leader
    wait(lambda: beats.of(leader) >= 3, timeout=30, what="the leader's heartbeats")
    # the follower started its scheduler as early and holds the same job, paused: never run
    assert paused(follower) and "heartbeat" in dict(follower.scheduler.jobs())
    assert beats.of(follower) == 0 and follower.scheduler.skipped == 0
    leader.stop()
    stopped_at = beats.of(leader)
    wait(follower.elector.is_leader, timeout=30, what="the follower to lead")
    # the new leader runs it
    wait(lambda: beats.of(follower) >= 3, timeout=30, what="the new leader's heartbeats")
    assert beats.of(leader) == stopped_at  # and the old one, stopped, never again
