"""Two agents against one twin and one database, each with the remediation executor registered as
a leader-gated background job: a decision recorded by the CLI (another process) is picked up by
the leader within about a second, the follower never runs it, and a remediation the leader left in
flight is resumed by the next leader once it holds the lease."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent.model.incident import IncidentQuery
from agent.model.lifecycle import IncidentStatus
from agent.rig.rig import AgentRig
from agent.runtime import remediation_queue
from agent.runtime.app import Agent
from agent.runtime.parts import Parts
from agent.runtime.root import Injected
from agent.store.repository import IncidentStore
from tests.runtime.step_remediator import StepRemediator
from tests.support.agent_rig import agent_settings
from tests.support.waiting import wait
from tests.twin import twin_fixtures

REPO = Path(__file__).resolve().parents[2]
S = IncidentStatus


@dataclass
class Replica:
    agent: Agent
    store: IncidentStore
    remediator: StepRemediator
    executor: remediation_queue.RemediationExecutor


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[tuple[list[Replica], str]]:
    books = tmp_path / "books"
    books.mkdir()  # no playbook: incidents stay open until someone decides
    with AgentRig(tmp_path) as rig:
        rig.start_twin(twin_fixtures.fast("seed-blocked"))
        settings = replace(agent_settings(tmp_path, rig.kubeconfig, None), playbooks_dir=str(books))
        settings = replace(settings, remediation=replace(
            settings.remediation, pickup_interval=timedelta(seconds=1),
            retry_after=timedelta(seconds=60)))  # no retry by the same leader in this test
        started: list[Replica] = []
        for name in ("a", "b"):
            made: list[StepRemediator] = []

            def runner(parts: Parts, store: IncidentStore, name: str = name,
                       made: list[StepRemediator] = made) -> StepRemediator:
                made.append(StepRemediator(store, lambda: datetime.now(UTC),
                                           name=f"remediator-{name}"))
                return made[-1]

            running = rig.start_agent(settings, injected=Injected(runner=runner), identity=name)
            built = running.agent.composition.remediation
            assert built is not None and made
            started.append(Replica(running.agent, running.store, made[-1], built.executor))
        yield started, settings.database.url


def _open_incident(store: IncidentStore) -> int | None:
    listing = store.list_incidents(IncidentQuery(open_only=True, limit=10))
    return listing.incidents[0].id if listing.incidents else None


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent.cli", *argv], cwd=REPO, check=False,
                          capture_output=True, text=True, timeout=60)


def test_the_leader_runs_a_cli_decision_and_the_next_leader_resumes_it(
    replicas: tuple[list[Replica], str],
) -> None:
    (a, b), url = replicas
    wait(lambda: a.agent.elector.is_leader() or b.agent.elector.is_leader(), timeout=20,
         what="a leader", interval=0.02)
    leader, follower = (a, b) if a.agent.elector.is_leader() else (b, a)
    wait(lambda: _open_incident(leader.store) is not None, timeout=20, what="an open incident",
         interval=0.02)
    incident_id = _open_incident(leader.store)
    assert incident_id is not None
    leader.remediator.stop_early.add(incident_id)  # it will stop while verifying

    done = _cli("incidents", "approve", str(incident_id), "--by", "carol", "--database", url)
    recorded_at = time.monotonic()
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"incident {incident_id} approved by carol\n"
    wait(lambda: incident_id in leader.remediator.calls, timeout=30,
         what="the leader's remediator called", interval=0.02)
    picked_up = time.monotonic() - recorded_at
    # picked up by the 1 s pickup tick, not by some later event such as a sweep (the bound is
    # generous: the machine may be loaded)
    assert picked_up < 10, f"picked up {picked_up:.1f} s after the approval"
    wait(lambda: leader.store.get_incident(incident_id).incident.status is S.VERIFYING,
         timeout=30, what="the incident verifying", interval=0.02)
    assert follower.remediator.calls == [] and follower.executor.runs == 0

    # the leader goes away with the remediation in flight: the next leader resumes it
    leader.agent.stop()
    wait(follower.agent.elector.is_leader, timeout=30, what="the follower to lead", interval=0.02)
    wait(lambda: follower.store.get_incident(incident_id).incident.status is S.RESOLVED,
         timeout=30, what="the incident resolved", interval=0.02)
    assert follower.remediator.calls == [incident_id]
    assert leader.remediator.calls == [incident_id]
    again = _cli("incidents", "approve", str(incident_id), "--database", url)
    assert again.returncode == 1
    assert "already approved by carol (via cli)" in again.stderr
