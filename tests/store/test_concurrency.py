"""Concurrent deciders: 16 threads in one process, and two processes, approve one incident at once.
Exactly one approval is recorded and every loser learns who won."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agent.model.incident import Actor, TransitionResult, Verdict
from agent.model.lifecycle import DecisionOutcome, DecisionSource, IncidentStatus
from agent.store.repository import IncidentStore
from tests.store.helpers import T0, finding

REPO = Path(__file__).resolve().parents[2]


def _awaiting(store: IncidentStore) -> int:
    incident_id = store.record_finding(finding()).incident.id
    assert store.transition(incident_id, IncidentStatus.OPEN, IncidentStatus.AWAITING_APPROVAL,
                            actor="agent", now=T0).applied
    return incident_id


def test_sixteen_threads_one_winner(store: IncidentStore) -> None:
    incident_id = _awaiting(store)
    barrier = threading.Barrier(16)
    results: dict[str, TransitionResult] = {}
    errors: list[BaseException] = []

    def decide(i: int) -> None:
        actor = Actor(f"U{i}", f"user{i}", DecisionSource.SLACK)
        outcome = DecisionOutcome.APPROVE if i % 2 == 0 else DecisionOutcome.REJECT
        barrier.wait()
        try:
            results[actor.id] = store.record_decision(incident_id, outcome, actor=actor, now=T0)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=decide, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    winners = [actor for actor, r in results.items() if r.applied]
    assert len(results) == 16 and len(winners) == 1
    winner = winners[0]
    for actor, r in results.items():
        assert r.decision is not None and r.decision.actor_id == winner, actor
        assert r.status_by == f"user{winner[1:]}"
    detail = store.get_incident(incident_id)
    assert [d.actor_id for d in detail.decisions] == [winner]
    expected = IncidentStatus.APPROVED if int(winner[1:]) % 2 == 0 else IncidentStatus.REJECTED
    assert detail.incident.status is expected
    decision_events = [e for e in detail.events if e.kind.value in ("approved", "rejected")]
    assert len(decision_events) == 1


def test_two_processes_one_winner(store: IncidentStore, db_url: str) -> None:
    incident_id = _awaiting(store)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.store.decider", db_url, str(incident_id), name, "8"],
            cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("replica-a", "replica-b")
    ]
    outputs: list[tuple[str, str]] = []
    try:
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline().strip()
            if line != "ready":
                pytest.fail(f"decider did not start: {line!r} {p.communicate()[1]}")
        for p in procs:  # both are ready: release them back to back
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        outputs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.communicate()
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err
    results = [json.loads(line) for out, _ in outputs for line in out.splitlines() if line]
    assert len(results) == 16
    winners = [r["actor"] for r in results if r["applied"]]
    assert len(winners) == 1
    assert {r["winner"] for r in results} == set(winners)
    assert {r["status"] for r in results} == {"approved"}
    detail = store.get_incident(incident_id)
    assert [d.actor_id for d in detail.decisions] == winners


VERDICTS = [Verdict.ZONE_SPLIT_BLOCKED, Verdict.POLICY_BLOCKED, Verdict.GPU_UTILIZATION_DROP,
            Verdict.ALERT]


@pytest.mark.parametrize("varied", [False, True], ids=["same-finding", "verdicts-and-uids"])
def test_concurrent_detections_open_one_incident(store: IncidentStore, varied: bool) -> None:
    """Eight first detections of one job at once (replicas racing, a restart's retry) open one
    incident, even when they see other verdicts or uids of the job (one open incident per job,
    held by the store's unique index on the open incidents' job)."""
    barrier = threading.Barrier(8)
    outcomes = []
    errors: list[BaseException] = []

    def detect(i: int) -> None:
        seen = (finding(verdict=VERDICTS[i % 4], uid=f"uid-{i % 3}") if varied else finding())
        barrier.wait()
        try:
            outcomes.append(store.record_finding(seen))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=detect, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert sum(o.new for o in outcomes) == 1
    assert len({o.incident.id for o in outcomes}) == 1
    [incident] = store.list_incidents().incidents
    assert incident.detections == 8
