"""Approval deadlines on SQLite and PostgreSQL: requesting approval with a deadline, deciding from
`open` or `awaiting_approval`, expiry (by the loop or by a late decision), snoozes that pause the
clock and wake, and an expiry racing concurrent decisions."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import pytest

from agent.model.incident import Actor, IncidentQuery, TransitionResult
from agent.model.lifecycle import (
    DECIDABLE,
    DECISION_STATUS,
    DecisionOutcome,
    DecisionSource,
    EventKind,
    IncidentStatus,
)
from agent.store.errors import InvalidRecordError
from agent.store.repository import IncidentStore
from tests.store.helpers import T0, finding, minutes

S = IncidentStatus
ALICE = Actor("U1", "alice", DecisionSource.SLACK)
HOUR = timedelta(hours=1)


def _awaiting(store: IncidentStore, name: str = "resnet", *, deadline: datetime = T0 + HOUR) -> int:
    incident_id = store.record_finding(finding(name)).incident.id
    result = store.request_approval(incident_id, deadline=deadline, now=T0, actor="agent")
    assert result.applied and result.status is S.AWAITING_APPROVAL
    return incident_id


def test_request_approval_records_the_deadline(store: IncidentStore) -> None:
    incident_id = _awaiting(store)
    detail = store.get_incident(incident_id)
    assert detail.incident.status is S.AWAITING_APPROVAL
    assert detail.incident.approval_deadline == T0 + HOUR
    assert detail.events[-1].kind is EventKind.AWAITING_APPROVAL
    assert detail.events[-1].detail == {"approval_deadline": (T0 + HOUR).isoformat()}
    [listed] = store.list_incidents(IncidentQuery()).incidents
    assert listed.approval_deadline == T0 + HOUR
    # Only from open: a second request is a loser that learns the current status.
    again = store.request_approval(incident_id, deadline=T0 + 2 * HOUR, now=T0, actor="other")
    assert not again.applied and again.status is S.AWAITING_APPROVAL and again.status_by == "agent"
    assert store.get_incident(incident_id).incident.approval_deadline == T0 + HOUR


@pytest.mark.parametrize(
    ("deadline", "message"),
    [
        (T0, "approval deadline 2026-11-01T12:00:00\\+00:00 must be a timezone-aware time after"),
        (T0 - minutes(1), "must be a timezone-aware time after 2026-11-01T12:00:00"),
        (datetime(2026, 12, 1), "approval deadline 2026-12-01T00:00:00 must be a timezone-aware"),
    ],
)
def test_a_bad_deadline_is_refused_and_changes_nothing(
    store: IncidentStore, deadline: datetime, message: str
) -> None:
    incident_id = store.record_finding(finding()).incident.id
    with pytest.raises(InvalidRecordError, match=message):
        store.request_approval(incident_id, deadline=deadline, now=T0, actor="agent")
    detail = store.get_incident(incident_id)
    assert detail.incident.status is S.OPEN and detail.incident.approval_deadline is None


@pytest.mark.parametrize("expected", sorted(DECIDABLE))
@pytest.mark.parametrize("outcome", list(DecisionOutcome))
def test_decidable_while_open_or_awaiting_approval(
    store: IncidentStore, expected: IncidentStatus, outcome: DecisionOutcome
) -> None:
    incident_id = (_awaiting(store) if expected is S.AWAITING_APPROVAL
                   else store.record_finding(finding()).incident.id)
    until = T0 + 4 * HOUR if outcome is DecisionOutcome.SNOOZE else None
    result = store.record_decision(incident_id, outcome, actor=ALICE, now=T0 + minutes(5),
                                   expected=expected, snoozed_until=until)
    assert result.applied and result.status is DECISION_STATUS[outcome]
    assert result.previous is expected
    assert [d.outcome for d in store.get_incident(incident_id).decisions] == [outcome]


def test_expire_due_expires_overdue_and_wakes_ended_snoozes(store: IncidentStore) -> None:
    overdue = _awaiting(store, "overdue", deadline=T0 + HOUR)
    later = _awaiting(store, "later", deadline=T0 + 3 * HOUR)
    no_deadline = store.record_finding(finding("no-deadline")).incident.id
    snooze_over = _awaiting(store, "snooze-over", deadline=T0 + 10 * HOUR)
    store.record_decision(snooze_over, DecisionOutcome.SNOOZE, actor=ALICE, now=T0,
                          snoozed_until=T0 + HOUR)
    snooze_on = store.record_finding(finding("snooze-on")).incident.id
    store.record_decision(snooze_on, DecisionOutcome.SNOOZE, actor=ALICE, now=T0,
                          expected=S.OPEN, snoozed_until=T0 + 5 * HOUR)

    assert store.expire_due(now=T0 + HOUR - minutes(1)) == []
    assert store.expire_due(now=T0 + HOUR) == sorted([overdue, snooze_over])
    assert store.expire_due(now=T0 + HOUR) == []  # nothing left to do at that time
    statuses = {i: store.get_incident(i).incident.status
                for i in (overdue, later, no_deadline, snooze_over, snooze_on)}
    assert statuses == {overdue: S.EXPIRED, later: S.AWAITING_APPROVAL, no_deadline: S.OPEN,
                        snooze_over: S.AWAITING_APPROVAL, snooze_on: S.SNOOZED}
    expired = store.get_incident(overdue)
    assert expired.incident.closed_at == T0 + HOUR
    assert expired.incident.status_by == "approval-deadline"
    assert expired.events[-1].kind is EventKind.EXPIRED
    assert expired.events[-1].detail == {"approval_deadline": (T0 + HOUR).isoformat()}
    woken = store.get_incident(snooze_over)
    assert woken.events[-1].kind is EventKind.AWAITING_APPROVAL
    assert woken.incident.status_by == "snooze-end"
    # Later: both deadlines pass and the second snooze ends; the open incident without a
    # deadline never expires by itself, nor does the woken one that never had a deadline.
    assert store.expire_due(now=T0 + 100 * HOUR) == sorted([later, snooze_over, snooze_on])
    assert store.get_incident(snooze_on).incident.status is S.AWAITING_APPROVAL
    assert store.get_incident(no_deadline).incident.status is S.OPEN


def test_a_snooze_pauses_the_approval_clock(store: IncidentStore) -> None:
    incident_id = _awaiting(store, deadline=T0 + HOUR)
    snoozed = store.record_decision(incident_id, DecisionOutcome.SNOOZE, actor=ALICE,
                                    now=T0 + minutes(30), snoozed_until=T0 + 4 * HOUR)
    assert snoozed.applied
    # 30 minutes were left when the snooze began; they are left again when it ends.
    detail = store.get_incident(incident_id)
    assert detail.incident.approval_deadline == T0 + 4 * HOUR + minutes(30)
    assert detail.events[-1].detail["approval_deadline"] == (T0 + 4 * HOUR + minutes(30)).isoformat()
    assert store.expire_due(now=T0 + 2 * HOUR) == []  # snoozed: the clock is paused
    assert store.expire_due(now=T0 + 4 * HOUR) == [incident_id]  # woken
    assert store.get_incident(incident_id).incident.status is S.AWAITING_APPROVAL
    assert store.expire_due(now=T0 + 4 * HOUR + minutes(29)) == []
    assert store.expire_due(now=T0 + 4 * HOUR + minutes(30)) == [incident_id]
    assert store.get_incident(incident_id).incident.status is S.EXPIRED


def test_a_decision_after_the_deadline_expires_the_incident(store: IncidentStore) -> None:
    incident_id = _awaiting(store, deadline=T0 + HOUR)
    late = store.record_decision(incident_id, DecisionOutcome.APPROVE, actor=ALICE,
                                 now=T0 + HOUR)
    assert not late.applied
    assert late.status is S.EXPIRED and late.status_by == "approval-deadline"
    assert late.decision is None
    detail = store.get_incident(incident_id)
    assert detail.incident.status is S.EXPIRED and detail.decisions == []
    assert [e.kind for e in detail.events].count(EventKind.EXPIRED) == 1
    again = store.record_decision(incident_id, DecisionOutcome.REJECT, actor=ALICE,
                                  now=T0 + 2 * HOUR)
    assert not again.applied and again.status is S.EXPIRED
    # Just before the deadline the decision still counts.
    other = _awaiting(store, "other", deadline=T0 + HOUR)
    assert store.record_decision(other, DecisionOutcome.APPROVE, actor=ALICE,
                                 now=T0 + HOUR - timedelta(microseconds=1)).applied


def test_expiry_racing_decisions_has_one_outcome(store: IncidentStore) -> None:
    incident_id = _awaiting(store, deadline=T0 + HOUR)
    barrier = threading.Barrier(9)
    results: list[TransitionResult] = []
    expired: list[list[int]] = []
    errors: list[BaseException] = []

    def decide(n: int) -> None:
        try:
            barrier.wait(timeout=30)
            actor = Actor(f"U{n}", f"user{n}", DecisionSource.SLACK)
            results.append(store.record_decision(incident_id, DecisionOutcome.APPROVE,
                                                 actor=actor, now=T0 + HOUR + minutes(n)))
        except BaseException as exc:
            errors.append(exc)

    def expire() -> None:
        try:
            barrier.wait(timeout=30)
            expired.append(store.expire_due(now=T0 + HOUR))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=decide, args=(n,)) for n in range(8)]
    threads.append(threading.Thread(target=expire))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == [] and len(results) == 8 and len(expired) == 1
    assert not any(r.applied for r in results)
    assert {r.status for r in results} == {S.EXPIRED}
    detail = store.get_incident(incident_id)
    assert detail.incident.status is S.EXPIRED and detail.decisions == []
    assert [e.kind for e in detail.events].count(EventKind.EXPIRED) == 1
