"""Two agents in one process against one twin and one database: a scheduled sweep runs on the
leader only (the follower's scheduler is paused and its guard refuses), and a hand-over does not
run it again: the new leader reads the sweep ledger the old one wrote on the Lease. Only the leader
records detector batches; the new leader catches up with one full diagnosis on acquiring the lease."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agent.runtime.app import Agent
from agent.runtime.pipeline import AgentPipeline
from agent.runtime.scheduler import LEDGER_ANNOTATION
from agent.store.migrate import upgrade_on_start
from tests.runtime.test_agent_e2e import agent_settings

twin_cluster = pytest.importorskip("agent.twin.cluster", reason="the twin is not merged yet")
kubeconfig = pytest.importorskip("agent.twin.kubeconfig")
fixtures = pytest.importorskip("tests.twin.twin_fixtures")

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


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[tuple[Agent, Agent]]:
    books = tmp_path / "books"
    books.mkdir()
    (books / "sweep.yaml").write_text(SWEEP_EVERY_MINUTE)
    cluster = twin_cluster.TwinCluster(fixtures.fast("seed-degraded")).start()
    started: list[tuple[Agent, Any]] = []
    try:
        api = cluster.serve_api()
        path = kubeconfig.write(tmp_path / "kubeconfig", api.url)
        settings = replace(agent_settings(tmp_path, path, None), playbooks_dir=str(books))
        for name in ("a", "b"):
            store = upgrade_on_start(settings)
            agent = Agent(settings, pipeline_factory=lambda parts, s=store: AgentPipeline(parts, s), identity=name)
            agent.start()
            started.append((agent, store))
        yield started[0][0], started[1][0]
    finally:
        for agent, store in started:
            agent.stop()
            store.close()
        cluster.stop()


def _wait(check: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def _fire_now(agent: Agent) -> None:
    agent.scheduler.scheduler.modify_job(JOB_ID, next_run_time=datetime.now(UTC))
    agent.scheduler.scheduler.wakeup()


def test_a_scheduled_sweep_runs_once_across_replicas_and_a_hand_over(agents: tuple[Agent, Agent]) -> None:
    a, b = agents
    while datetime.now(UTC).second > 45:  # keep both fire times inside one schedule minute
        time.sleep(0.5)
    _wait(lambda: a.elector.is_leader() or b.elector.is_leader())
    leader, follower = (a, b) if a.elector.is_leader() else (b, a)
    _wait(lambda: findings(leader) > 0)  # the leader recorded its start-up (or catch-up) batch
    for agent in (a, b):  # the schedule fires on both replicas
        _fire_now(agent)
    _wait(lambda: sweeps(leader) == 1)
    time.sleep(0.5)
    assert (sweeps(leader), sweeps(follower)) == (1, 0)
    assert findings(follower) == 0  # a follower records no detector batch
    assert follower.scheduler.skipped + follower.scheduler.already_done == 0  # paused: not even tried
    _wait(lambda: LEDGER_ANNOTATION in leader.elector.annotations())
    leader.stop()  # graceful: the ledger is on the Lease, the lease released
    _wait(follower.elector.is_leader, timeout=5)
    _wait(lambda: findings(follower) > 0)  # the new leader catches up: one full diagnosis, recorded
    # the follower's paused scheduler still holds this minute's run as due: resuming must skip it
    _wait(lambda: follower.scheduler.already_done >= 1)
    _fire_now(follower)  # and firing it again for the same schedule time does nothing either
    _wait(lambda: follower.scheduler.already_done >= 2)
    assert (sweeps(leader), sweeps(follower)) == (1, 0)
