"""`IncidentStore.record_findings`: many findings in one transaction per chunk write what
`record_finding` writes one at a time (incidents, re-detections, folded timeline rows), and a new
incident's follow-up (plan preview, approval request, messages, notes) commits with it."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import text

from agent.model.incident import (
    ActionDraft,
    Actor,
    EventDraft,
    FindingOutcome,
    FindingRecord,
    FollowUp,
    MessageDraft,
    Verdict,
)
from agent.model.lifecycle import (
    DecisionOutcome,
    DecisionSource,
    EventKind,
    IncidentStatus,
    MessageKind,
    RemediationActionKind,
)
from agent.store.errors import InvalidRecordError
from agent.store.repository import IncidentStore, open_store
from tests.store.helpers import T0, finding, minutes
from tests.support.databases import TEST_DB_SETTINGS

# Rounds of findings, each recorded as one call; between rounds 1 and 2 incident "b" is approved
# (decided: a re-detection keeps its verdict). Round 2 is within the fold window of round 1,
# round 3 past it; a job seen twice in a round is recorded one at a time after the first.
ROUNDS: list[list[FindingRecord]] = [
    [finding("a", utilization_now=40.0, gpus=4), finding("b"), finding("c"),
     finding("a", at=T0 + timedelta(seconds=1), utilization_now=39.0)],
    [finding("a", at=T0 + minutes(1), verdict=Verdict.ZONE_SPLIT_DEGRADED),
     finding("b", at=T0 + minutes(1), verdict=Verdict.ZONE_SPLIT_DEGRADED, gpus=8),
     finding("d", at=T0 + minutes(1), verdict=Verdict.POLICY_BLOCKED),
     finding("c", at=T0 + minutes(1), verdict=Verdict.POLICY_BLOCKED),
     finding("a", at=T0 + minutes(2), verdict=Verdict.ZONE_SPLIT_DEGRADED)],
    [finding("a", at=T0 + minutes(20), estimated_cost=3.5), finding("d", at=T0 + minutes(20))],
]


def _approve_b(store: IncidentStore) -> None:
    listing = store.list_incidents()
    b = next(i for i in listing.incidents if i.name == "b")
    store.transition(b.id, IncidentStatus.OPEN, IncidentStatus.AWAITING_APPROVAL, actor="agent",
                     now=T0 + timedelta(seconds=30))
    store.record_decision(b.id, DecisionOutcome.APPROVE, now=T0 + timedelta(seconds=40),
                          actor=Actor("U1", "dana", DecisionSource.SLACK))


def _contents(store: IncidentStore) -> list[tuple[Any, ...]]:
    """Every incident with its events and messages, without ids (keyed by job and verdict)."""
    with store.engine.connect() as conn:
        incidents = conn.execute(text(
            "SELECT id, job_name, verdict, status, severity, fingerprint, opened_at, updated_at, "
            "closed_at, target_zone, diagnosis, utilization_before, estimated_cost, gpus, "
            "detections FROM incidents")).all()
        events = conn.execute(text(
            "SELECT incident_id, kind, at, actor, detail FROM incident_events ORDER BY id")).all()
        messages = conn.execute(text(
            "SELECT incident_id, kind, channel, payload, dedupe_key, status FROM outbox_messages "
            "ORDER BY id")).all()
    out = []
    for row in incidents:
        own = [tuple(e[1:]) for e in events if e[0] == row[0]]
        sent = [tuple(m[1:]) for m in messages if m[0] == row[0]]
        out.append((tuple(str(v) for v in row[1:]), own, sent))
    return sorted(out, key=lambda item: item[0])


def test_record_findings_writes_what_record_finding_writes(store: IncidentStore, db_url: str) -> None:
    one_by_one: list[list[FindingOutcome]] = []
    for n, records in enumerate(ROUNDS):
        if n == 1:
            _approve_b(store)
        one_by_one.append([store.record_finding(r) for r in records])
    expected = _contents(store)
    with store.engine.begin() as conn:
        for table in ("incident_events", "outbox_messages", "decisions", "incidents"):
            conn.execute(text(f"DELETE FROM {table}"))
    for n, records in enumerate(ROUNDS):
        if n == 1:
            _approve_b(store)
        batched = store.record_findings(records, batch=3)  # chunks of 3: a round spans two
        assert [(o.new, o.incident.name, o.incident.verdict, o.incident.detections)
                for o in batched] == [
            (o.new, o.incident.name, o.incident.verdict, o.incident.detections)
            for o in one_by_one[n]]  # fmt: skip
    assert _contents(store) == expected
    (a,) = [i for i in store.list_incidents().incidents if i.name == "a"]  # one per job
    kinds = [(e.kind, e.detail.get("verdict"), e.detail.get("repeats"))
             for e in store.get_incident(a.id).events]
    # a repeat of the same verdict within the window folds; a new verdict is a row of its own
    assert kinds == [
        (EventKind.DETECTED, "zone_split_blocked", None),
        (EventKind.REDETECTED, "zone_split_blocked", None),
        (EventKind.REDETECTED, "zone_split_degraded", 2),
        (EventKind.REDETECTED, "zone_split_blocked", None),
    ]
    assert a.detections == 5


def _follow(records: list[FindingRecord]) -> Any:
    def follow(i: int, outcome: FindingOutcome) -> FollowUp | None:
        record = records[i]
        if record.name == "quiet":
            return None
        incident = outcome.incident.id
        return FollowUp(
            now=T0 + minutes(1),
            action=ActionDraft(RemediationActionKind.PLAN, {"plan": {"diff": f"-{record.name}"}},
                               actor="zonemedic", succeeded=True, message="preview",
                               event=EventKind.PLAN_PREVIEWED),
            approval_deadline=T0 + minutes(240),
            messages=tuple(
                MessageDraft(MessageKind.POST, {"action": action, "incident_id": incident},
                             channel="#ml", dedupe_key=f"{action}:pb:{incident}")
                for action in ("notify", "propose_colocation")
            ),
            notes=(EventDraft(EventKind.NOTE, {"not_posted": "no playbook"}, actor="agent"),),
        )  # fmt: skip

    return follow


def test_a_new_incident_commits_with_its_follow_up(store: IncidentStore) -> None:
    store.record_finding(finding("old"))
    records = [finding("old"), finding("x"), finding("quiet"), finding("y")]
    outcomes = store.record_findings(records, follow=_follow(records), batch=2)
    assert [o.new for o in outcomes] == [False, True, True, True]
    for outcome in outcomes:
        detail = store.get_incident(outcome.incident.id)
        if outcome.incident.name in ("old", "quiet"):  # no follow-up: a re-detection, or None
            assert detail.messages == [] and detail.actions == []
            assert detail.incident.status is IncidentStatus.OPEN
            continue
        assert detail.incident.status is IncidentStatus.AWAITING_APPROVAL
        assert [m.payload["action"] for m in detail.messages] == ["notify", "propose_colocation"]
        assert [a.kind for a in detail.actions] == [RemediationActionKind.PLAN]
        assert [e.kind for e in detail.events] == [
            EventKind.DETECTED, EventKind.PLAN_PREVIEWED, EventKind.AWAITING_APPROVAL, EventKind.NOTE]
    again = store.record_findings(records, follow=_follow(records))
    assert not any(o.new for o in again)  # re-detections: nothing queued twice
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM outbox_messages")).scalar() == 4


def test_a_dedupe_key_queued_already_is_not_queued_again(store: IncidentStore) -> None:
    first = store.record_findings([finding("x")])[0]
    store.enqueue_message(MessageKind.POST, payload={"early": True}, now=T0,
                          incident_id=first.incident.id, dedupe_key="notify:y")

    def follow(_i: int, _outcome: FindingOutcome) -> FollowUp:
        return FollowUp(now=T0, messages=tuple(
            MessageDraft(MessageKind.POST, {"action": action}, dedupe_key=f"{action}:y")
            for action in ("notify", "propose_colocation", "notify")))  # fmt: skip

    outcome = store.record_findings([finding("y")], follow=follow)[0]
    messages = store.get_incident(outcome.incident.id).messages
    assert [m.payload.get("action") for m in messages] == ["propose_colocation"]
    assert [m.payload for m in store.get_incident(first.incident.id).messages] == [{"early": True}]


def test_a_bad_follow_up_writes_nothing_of_its_chunk(store: IncidentStore) -> None:
    def follow(_i: int, _outcome: FindingOutcome) -> FollowUp:
        return FollowUp(now=T0, approval_deadline=T0 - minutes(1))

    with pytest.raises(InvalidRecordError, match="approval deadline"):
        store.record_findings([finding("x"), finding("y")], follow=follow)
    assert store.list_incidents().incidents == []
    with pytest.raises(InvalidRecordError, match="batch size"):
        store.record_findings([finding("x")], batch=0)


def test_overlong_values_are_refused_before_any_write(store: IncidentStore) -> None:
    with pytest.raises(InvalidRecordError, match="name is"):
        store.record_findings([finding("x"), finding("n" * 300)])
    assert store.list_incidents().incidents == []


def test_two_writers_open_one_incident_per_job(store: IncidentStore, db_url: str) -> None:
    """Two stores record the same new findings at once: one incident per job, each found twice,
    its messages queued once (the loser's multi-row insert conflicts and it records one by one)."""
    other = open_store(TEST_DB_SETTINGS, url=db_url)
    records = [finding(f"job-{i}") for i in range(30)]
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []
    results: list[list[FindingOutcome]] = []

    def run(target: IncidentStore) -> None:
        barrier.wait()
        try:
            results.append(target.record_findings(records, follow=_follow(records)))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(s,)) for s in (store, other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    other.close()
    assert errors == []
    assert sum(o.new for r in results for o in r) == 30
    incidents = store.list_incidents().incidents
    assert len(incidents) == 30 and all(i.detections == 2 for i in incidents)
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM outbox_messages")).scalar() == 60
