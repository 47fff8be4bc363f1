"""`decide` against the real store, on SQLite and PostgreSQL: what it records, what it refuses,
and 16 concurrent deciders giving exactly one recorded decision."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

from agent.approval.approvers import Authority
from agent.approval.decision import (
    DEFAULT_SNOOZE,
    DecisionReason,
    DecisionRequest,
    DecisionResult,
    decide,
)
from agent.model.incident import Actor, IncidentDetail, TransitionResult
from agent.model.lifecycle import DecisionOutcome, DecisionSource, IncidentStatus
from agent.store.repository import IncidentStore
from tests.store.helpers import T0, finding

S = IncidentStatus
D = DecisionOutcome
CAROL = Actor("carol", "Carol", DecisionSource.CLI)

# every decider of these tests is an approver in force
AUTHORITY = Authority(users=frozenset({"carol", "U9", *(f"U{i}" for i in range(16))}))


def _open(store: IncidentStore, name: str = "resnet") -> int:
    return store.record_finding(finding(name)).incident.id


def _awaiting(store: IncidentStore, name: str = "resnet") -> int:
    incident_id = _open(store, name)
    assert store.transition(incident_id, S.OPEN, S.AWAITING_APPROVAL, actor="zonemedic",
                            now=T0).applied
    return incident_id


def test_approve_an_open_incident(store: IncidentStore) -> None:
    incident_id = _open(store)
    result = decide(store, DecisionRequest(incident_id, D.APPROVE, CAROL, reason="go"), now=T0, authority=AUTHORITY)
    assert (result.recorded, result.reason, result.status) == (True, DecisionReason.RECORDED,
                                                               S.APPROVED)
    assert (result.decided_by, result.decided_at) == ("Carol", T0)
    detail = store.get_incident(incident_id)
    assert detail.incident.status is S.APPROVED
    assert [(d.actor_id, d.outcome, d.source, d.comment) for d in detail.decisions] == [
        ("carol", D.APPROVE, DecisionSource.CLI, "go")]


def test_reject_and_snooze_awaiting_incidents(store: IncidentStore) -> None:
    rejected = _awaiting(store, "a")
    snoozed = _awaiting(store, "b")
    r = decide(store, DecisionRequest(rejected, D.REJECT, CAROL), now=T0, authority=AUTHORITY)
    s = decide(store, DecisionRequest(snoozed, D.SNOOZE, CAROL), now=T0, authority=AUTHORITY)
    assert (r.recorded, r.status, s.recorded, s.status) == (True, S.REJECTED, True, S.SNOOZED)
    assert s.snoozed_until == T0 + DEFAULT_SNOOZE
    assert store.get_incident(snoozed).snoozed_until == T0 + DEFAULT_SNOOZE
    assert store.get_incident(rejected).incident.closed_at == T0


def test_snooze_an_open_incident_for_a_while(store: IncidentStore) -> None:
    incident_id = _open(store)
    result = decide(store, DecisionRequest(incident_id, D.SNOOZE, CAROL,
                                           snooze_for=timedelta(hours=2)), now=T0, authority=AUTHORITY)
    assert result.recorded and result.status is S.SNOOZED
    assert store.get_incident(incident_id).snoozed_until == T0 + timedelta(hours=2)


def test_second_decision_names_the_first(store: IncidentStore) -> None:
    incident_id = _awaiting(store)
    first = decide(store, DecisionRequest(incident_id, D.APPROVE, CAROL), now=T0, authority=AUTHORITY)
    later = T0 + timedelta(minutes=1)
    second = decide(store, DecisionRequest(incident_id, D.REJECT, Actor("U9", "dave",
                                                                        DecisionSource.SLACK)),
                    now=later, authority=AUTHORITY)
    assert first.recorded and not second.recorded
    assert (second.reason, second.status, second.decided_by, second.decided_at) == (
        DecisionReason.ALREADY_DECIDED, S.APPROVED, "Carol", T0)
    assert "already approved by Carol (via cli)" in second.message
    assert len(store.get_incident(incident_id).decisions) == 1


def test_refusals_change_nothing(store: IncidentStore) -> None:
    superseded = _open(store, "gone")
    store.transition(superseded, S.OPEN, S.SUPERSEDED, actor="zonemedic", now=T0)
    expired = _awaiting(store, "late")
    store.transition(expired, S.AWAITING_APPROVAL, S.EXPIRED, actor="zonemedic", now=T0)
    later = T0 + timedelta(hours=1)
    cases: dict[int, tuple[DecisionReason, S | None]] = {
        superseded: (DecisionReason.NOT_CURRENT, S.SUPERSEDED),
        expired: (DecisionReason.EXPIRED, S.EXPIRED),
        999_999: (DecisionReason.NOT_FOUND, None),
    }
    for incident_id, (reason, status) in cases.items():
        before = None if status is None else store.get_incident(incident_id)
        result = decide(store, DecisionRequest(incident_id, D.APPROVE, CAROL), now=later, authority=AUTHORITY)
        assert (result.recorded, result.reason, result.status) == (False, reason, status)
        if before is not None:
            after = store.get_incident(incident_id)
            assert after == before  # no decision, no event, no status change
            assert (result.decided_by, result.decided_at) == ("zonemedic", T0)


class _RaceStore:
    """The real store, with the agent requesting approval (open -> awaiting_approval) right
    after the decider's first read: the decider loses its first conditional UPDATE."""

    def __init__(self, store: IncidentStore) -> None:
        self.store = store
        self.reads = 0

    def get_incident(self, incident_id: int) -> IncidentDetail:
        detail = self.store.get_incident(incident_id)
        self.reads += 1
        if self.reads == 1:
            self.store.transition(incident_id, S.OPEN, S.AWAITING_APPROVAL, actor="zonemedic",
                                  now=T0)
        return detail

    def record_decision(self, incident_id: int, outcome: DecisionOutcome, **kw: object
                        ) -> TransitionResult:
        return self.store.record_decision(incident_id, outcome, **kw)  # type: ignore[arg-type]


def test_a_request_for_approval_in_between_is_still_decidable(store: IncidentStore) -> None:
    incident_id = _open(store)
    racing = _RaceStore(store)
    result = decide(racing, DecisionRequest(incident_id, D.APPROVE, CAROL), now=T0, authority=AUTHORITY)
    assert result.recorded and result.status is S.APPROVED
    assert racing.reads == 2
    assert [e.kind.value for e in store.get_incident(incident_id).events][-2:] == [
        "awaiting_approval", "approved"]


def test_sixteen_deciders_one_recorded(store: IncidentStore) -> None:
    incident_id = _awaiting(store)
    barrier = threading.Barrier(16)
    results: dict[str, DecisionResult] = {}
    errors: list[BaseException] = []
    now = datetime.now(T0.tzinfo)

    def run(i: int) -> None:
        actor = Actor(f"U{i}", f"user{i}", DecisionSource.SLACK)
        outcome = (D.APPROVE, D.REJECT, D.SNOOZE)[i % 3]
        barrier.wait()
        try:
            results[actor.id] = decide(store, DecisionRequest(incident_id, outcome, actor),
                                       now=now, authority=AUTHORITY)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert len(results) == 16
    winners = [actor for actor, r in results.items() if r.recorded]
    assert len(winners) == 1
    winner = winners[0]
    assert results[winner].reason is DecisionReason.RECORDED
    for actor, r in results.items():
        if actor == winner:
            continue
        assert r.reason is DecisionReason.ALREADY_DECIDED, (actor, r)
        assert r.decided_by == f"user{winner[1:]}"
        assert r.decision is not None and r.decision.actor_id == winner
        assert f"by user{winner[1:]} (via slack)" in r.message
    detail = store.get_incident(incident_id)
    assert [d.actor_id for d in detail.decisions] == [winner]
    assert detail.incident.status is results[winner].status


def test_past_the_approval_deadline_nothing_changes(store: IncidentStore) -> None:
    late, in_time = _open(store, "late"), _open(store, "in-time")
    deadline = T0 + timedelta(minutes=30)
    for incident_id in (late, in_time):
        assert store.request_approval(incident_id, deadline=deadline, now=T0,
                                      actor="zonemedic").applied
    before = store.get_incident(late)
    result = decide(store, DecisionRequest(late, D.APPROVE, CAROL), now=deadline, authority=AUTHORITY)
    assert (result.recorded, result.reason, result.status) == (
        False, DecisionReason.EXPIRED, S.AWAITING_APPROVAL)
    assert result.decided_at == deadline
    assert "its approval deadline passed at" in result.message
    assert store.get_incident(late) == before  # no decision, no event, no status change
    ok = decide(store, DecisionRequest(in_time, D.REJECT, CAROL),
                now=deadline - timedelta(seconds=1), authority=AUTHORITY)
    assert ok.recorded and ok.status is S.REJECTED
    # the leader's expiry job then expires the unanswered one; deciding says so
    assert store.expire_due(now=deadline) == [late]
    after = decide(store, DecisionRequest(late, D.APPROVE, CAROL), now=deadline, authority=AUTHORITY)
    assert (after.reason, after.status) == (DecisionReason.EXPIRED, S.EXPIRED)
    assert "expired at" in after.message
