"""Start-up: the agent's first batch is one cluster-wide diagnosis, already the leader's when the
lease is free (the election's first step is taken before the detector runs), and the scheduler
runs as soon as start() returns; a second replica starting while another leads only warms its
mirror until it takes over."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from apscheduler.schedulers.base import STATE_RUNNING

from agent.rig.rig import AgentRig
from agent.runtime.app import Agent
from agent.runtime.pipeline import AgentPipeline
from agent.runtime.root import Injected
from agent.sources.change import Change
from tests.support.agent_rig import agent_settings
from tests.support.waiting import wait
from tests.twin import twin_fixtures as fixtures


class Watched(AgentPipeline):
    """The real pipeline, noting each batch: (cluster-wide, leading when it ran, its reasons)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batches: list[tuple[bool, bool, tuple[str, ...]]] = []

    def handle_change(self, change: Change, first_seen: float) -> Change | None:
        self.batches.append((change.everything, self.is_leader(), change.reasons))
        return super().handle_change(change, first_seen)


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Any]:
    with AgentRig(tmp_path) as rig:
        rig.start_twin(fixtures.fast("seed-degraded"))
        settings = agent_settings(tmp_path, rig.kubeconfig, None)
        # no debounce: what the sync reported is due the moment the detector runs
        settings = replace(settings, detection=replace(settings.detection, debounce=timedelta(0)))
        # no take-over is tested here: a lease long enough that a busy machine cannot let the
        # first replica's lapse while the second one starts
        settings = replace(settings, leader_election=replace(
            settings.leader_election, lease_duration=timedelta(seconds=20),
            renew_deadline=timedelta(seconds=15)))

        def start_agent(identity: str) -> tuple[Agent, Watched]:
            agent = rig.start_agent(settings, injected=Injected(pipeline_class=Watched),
                                    identity=identity).agent
            assert isinstance(agent.pipeline, Watched)
            return agent, agent.pipeline

        yield start_agent


def test_the_first_batch_is_one_cluster_wide_diagnosis_by_the_leader(start: Any) -> None:
    agent, pipeline = start("a")
    assert agent.elector.is_leader()  # the first election step ran inside start()
    assert agent.scheduler.scheduler.state == STATE_RUNNING  # resumed for the leader at once
    wait(lambda: pipeline.batches, timeout=30, what="the first batch")
    everything, leading, reasons = pipeline.batches[0]
    assert (everything, leading) == (True, True)
    assert "start-up" in reasons  # merged with what the initial sync reported
    wait(lambda: pipeline.diagnoser.diagnoses >= 1, timeout=30, what="the first diagnosis")
    assert pipeline.followed.batches == 0


def test_a_replica_starting_while_another_leads_warms_its_mirror_only(start: Any) -> None:
    leader, _ = start("a")
    follower, pipeline = start("b")
    assert leader.elector.is_leader() and not follower.elector.is_leader()
    wait(lambda: pipeline.followed.batches >= 1, timeout=30, what="the follower's first batch")
    assert pipeline.batches[0][:2] == (True, False)
    # parsed, not diagnosed (by its batch or by the what-if warm-up, whichever came first)
    assert pipeline.diagnoser.diagnoses == 0 and pipeline.diagnoser.mirror.generation >= 1
