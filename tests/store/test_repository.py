"""The repository on SQLite and PostgreSQL: findings and dedupe, transitions, decisions, actions,
history queries, stats, retention and unreadable rows (the outbox: test_outbox.py; approval
deadlines: test_approval_deadlines.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import text

from agent.model.incident import Actor, IncidentQuery, Verdict
from agent.model.lifecycle import (
    DecisionOutcome,
    DecisionSource,
    EventKind,
    IncidentStatus,
    LifecycleError,
    MessageKind,
    RemediationActionKind,
    ResumeAction,
    gpu_hours_recovered,
)
from agent.store.errors import (
    CorruptRecordError,
    IncidentNotFoundError,
    InvalidRecordError,
    StoreError,
)
from agent.store.repository import IncidentStore
from agent.store.schema import metadata
from tests.store.helpers import T0, finding, minutes

S = IncidentStatus
ALICE = Actor("U1", "alice", DecisionSource.SLACK)
BOB = Actor("U2", "bob", DecisionSource.SLACK)


def _to_awaiting(store: IncidentStore, incident_id: int) -> None:
    result = store.transition(incident_id, S.OPEN, S.AWAITING_APPROVAL, actor="agent", now=T0)
    assert result.applied


@pytest.mark.parametrize(
    ("decided", "kept"),
    [(False, Verdict.ZONE_SPLIT_BLOCKED), (True, Verdict.ZONE_SPLIT_DEGRADED)],
)
def test_a_redetection_changes_the_verdict_only_before_a_decision(
    store: IncidentStore, decided: bool, kept: Verdict
) -> None:
    incident_id = store.record_finding(finding(verdict=Verdict.ZONE_SPLIT_DEGRADED)).incident.id
    if decided:
        _to_awaiting(store, incident_id)
        assert store.record_decision(incident_id, DecisionOutcome.APPROVE, actor=ALICE,
                                     now=T0).applied
    again = store.record_finding(finding(verdict=Verdict.ZONE_SPLIT_BLOCKED, at=T0 + minutes(1)))
    assert again.incident.id == incident_id  # the same split either way
    detail = store.get_incident(incident_id)
    assert detail.incident.verdict is kept
    assert detail.incident.detections == 2
    seen = [e.detail.get("verdict") for e in detail.events if e.kind is EventKind.REDETECTED]
    assert seen == ["zone_split_blocked"]  # what was seen is on the timeline either way


def test_record_finding_opens_then_redetects(store: IncidentStore) -> None:
    first = store.record_finding(finding(utilization_now=40.0, gpus=4))
    again = store.record_finding(
        finding(at=T0 + minutes(5), verdict=Verdict.ZONE_SPLIT_DEGRADED, utilization_now=38.0)
    )
    assert first.new and not again.new
    assert again.incident.id == first.incident.id
    assert again.incident.detections == 2
    assert again.incident.verdict is Verdict.ZONE_SPLIT_DEGRADED  # same class: zone_split
    assert again.incident.utilization_before == 38.0
    assert again.incident.updated_at == T0 + minutes(5)
    detail = store.get_incident(first.incident.id)
    assert [e.kind for e in detail.events] == [EventKind.DETECTED, EventKind.REDETECTED]
    assert detail.diagnosis["verdict"] == "zone_split_degraded"


@pytest.mark.parametrize(
    ("other", "same_incident"),
    [
        ({"verdict": Verdict.ZONE_SPLIT_DEGRADED}, True),
        ({"verdict": Verdict.POLICY_BLOCKED}, True),  # one open incident per job
        ({"verdict": Verdict.GPU_UTILIZATION_DROP}, True),
        ({"uid": "another-uid"}, True),  # the same job (recreated, or its uid unknown at first)
        ({"uid": ""}, True),
        ({"cluster": "staging"}, False),
        ({"name": "other-job"}, False),
        ({"namespace": "other-ns"}, False),
    ],
)
def test_dedupe_key(store: IncidentStore, other: dict[str, object], same_incident: bool) -> None:
    first = store.record_finding(finding())
    second = store.record_finding(finding(**other))  # type: ignore[arg-type]
    assert (second.incident.id == first.incident.id) is same_incident
    assert second.new is not same_incident
    assert len(store.list_incidents(IncidentQuery(open_only=True)).incidents) == (
        1 if same_incident else 2)


@pytest.mark.parametrize(
    ("opened", "seen", "after"),
    [
        # before a decision a topology verdict replaces any verdict, a symptom only its own class
        (Verdict.ZONE_SPLIT_DEGRADED, Verdict.POLICY_BLOCKED, Verdict.POLICY_BLOCKED),
        (Verdict.POLICY_BLOCKED, Verdict.ZONE_LABEL_MISMATCH, Verdict.ZONE_LABEL_MISMATCH),
        (Verdict.GPU_UTILIZATION_DROP, Verdict.ZONE_SPLIT_BLOCKED, Verdict.ZONE_SPLIT_BLOCKED),
        (Verdict.ALERT, Verdict.ZONE_SPLIT_DEGRADED, Verdict.ZONE_SPLIT_DEGRADED),
        (Verdict.ZONE_SPLIT_BLOCKED, Verdict.GPU_UTILIZATION_DROP, Verdict.ZONE_SPLIT_BLOCKED),
        (Verdict.ZONE_SPLIT_BLOCKED, Verdict.ALERT, Verdict.ZONE_SPLIT_BLOCKED),
        (Verdict.GPU_UTILIZATION_DROP, Verdict.ALERT, Verdict.GPU_UTILIZATION_DROP),
    ],
)
def test_a_job_keeps_one_incident_whose_verdict_follows_the_diagnosis(
    store: IncidentStore, opened: Verdict, seen: Verdict, after: Verdict
) -> None:
    first = store.record_finding(finding(verdict=opened))
    again = store.record_finding(finding(verdict=seen, at=T0 + minutes(1)))
    assert not again.new and again.incident.id == first.incident.id
    assert again.previous_verdict is opened
    assert again.incident.verdict is after
    assert again.verdict_changed is (after is not opened)
    detail = store.get_incident(first.incident.id)
    assert detail.diagnosis["verdict"] == after.value
    # what was seen is on the timeline, a verdict change as a row of its own
    redetected = [e for e in detail.events if e.kind is EventKind.REDETECTED]
    assert [e.detail["verdict"] for e in redetected] == [seen.value]


def test_a_verdict_change_is_a_timeline_row_of_its_own(store: IncidentStore) -> None:
    first = store.record_finding(finding(verdict=Verdict.ZONE_SPLIT_DEGRADED))
    for i, verdict in enumerate([Verdict.ZONE_SPLIT_DEGRADED, Verdict.ZONE_SPLIT_BLOCKED,
                                 Verdict.ZONE_SPLIT_BLOCKED, Verdict.POLICY_BLOCKED], start=1):
        store.record_finding(finding(verdict=verdict, at=T0 + minutes(i)))
    events = store.get_incident(first.incident.id).events
    rows = [(e.detail["verdict"], e.detail.get("repeats", 1))
            for e in events if e.kind is EventKind.REDETECTED]
    # repeats of one verdict fold into its row; each change starts a row
    assert rows == [("zone_split_degraded", 1), ("zone_split_blocked", 2),
                    ("policy_blocked", 1)]


def test_a_new_incident_only_after_the_last_one_closed(store: IncidentStore) -> None:
    first = store.record_finding(finding(verdict=Verdict.POLICY_BLOCKED))
    store.transition(first.incident.id, S.OPEN, S.SUPERSEDED, actor="agent", now=T0 + minutes(1))
    second = store.record_finding(finding(verdict=Verdict.ZONE_SPLIT_BLOCKED, at=T0 + minutes(2)))
    assert second.new and second.incident.id != first.incident.id


def test_the_store_refuses_a_second_open_incident_of_a_job(store: IncidentStore) -> None:
    """The unique index, not only the agent's reads: an INSERT that skips the dedupe lookup (a
    second replica racing, an older agent) is refused by the database itself."""
    store.record_finding(finding())
    with store.engine.begin() as conn, pytest.raises(Exception, match="(?i)unique"):
        conn.execute(text(
            "INSERT INTO incidents (cluster, job_kind, job_namespace, job_name, verdict, "
            "fingerprint, status, severity, opened_at, updated_at, detections, diagnosis) VALUES "
            "('prod', 'PyTorchJob', 'ml', 'resnet', 'policy_blocked', 'another-fp', 'open', "
            "'critical', :t, :t, 1, '{}')"), {"t": "2026-11-01 12:00:00"})
    assert len(store.list_incidents().incidents) == 1


def test_utilization_before_is_read_from_the_samples_while_open(store: IncidentStore) -> None:
    opened = T0.timestamp()
    first = store.record_finding(finding(utilization_now=63.0, utilization_samples=(
        (opened - 30, 85.0), (opened - 10, 63.0))))
    assert first.incident.utilization_before is None  # samples from before it opened only
    again = store.record_finding(finding(at=T0 + minutes(1), utilization_now=2.0,
                                         utilization_samples=((opened - 10, 63.0),
                                                              (opened + 40, 2.0))))
    assert again.incident.utilization_before == 2.0
    later = store.record_finding(finding(at=T0 + minutes(2), utilization_now=None,
                                         utilization_samples=((opened - 10, 63.0),)))
    assert later.incident.utilization_before == 2.0  # never erased by a later lack of samples


def test_closed_incident_is_not_reopened(store: IncidentStore) -> None:
    first = store.record_finding(finding())
    store.transition(first.incident.id, S.OPEN, S.RESOLVED, actor="agent", now=T0 + minutes(1))
    second = store.record_finding(finding(at=T0 + minutes(2)))
    assert second.new and second.incident.id != first.incident.id


def test_not_an_incident_verdict_is_refused(store: IncidentStore) -> None:
    with pytest.raises(LifecycleError, match="healthy"):
        store.record_finding(finding(verdict=Verdict.HEALTHY))
    assert store.list_incidents().incidents == []


def test_overlong_values_are_refused_on_every_backend(store: IncidentStore) -> None:
    with pytest.raises(InvalidRecordError, match="uid is 200 characters, at most 128 fit"):
        store.record_finding(finding(uid="u" * 200))
    assert store.list_incidents().incidents == []


def test_times_are_utc_aware(store: IncidentStore) -> None:
    plus_two = timezone(timedelta(hours=2))
    at = datetime(2026, 11, 1, 14, 0, tzinfo=plus_two)
    outcome = store.record_finding(finding(at=at))
    assert outcome.incident.opened_at == at
    assert outcome.incident.opened_at.tzinfo is not None
    assert outcome.incident.opened_at.utcoffset() == timedelta(0)


def test_naive_time_is_refused(store: IncidentStore) -> None:
    with pytest.raises(Exception, match="naive datetime"):
        store.record_finding(finding(at=datetime(2026, 1, 1)))


def test_transition_lifecycle_and_events(store: IncidentStore) -> None:
    incident_id = store.record_finding(finding()).incident.id
    _to_awaiting(store, incident_id)
    won = store.record_decision(incident_id, DecisionOutcome.APPROVE, actor=ALICE,
                                now=T0 + minutes(3), comment="go")
    assert won.applied and won.status is S.APPROVED and won.decision is not None
    for old, new in [(S.APPROVED, S.REMEDIATING), (S.REMEDIATING, S.VERIFYING),
                     (S.VERIFYING, S.RESOLVED)]:
        result = store.transition(incident_id, old, new, actor="agent-0", now=T0 + minutes(10))
        assert result.applied and result.status is new
    detail = store.get_incident(incident_id)
    assert detail.incident.status is S.RESOLVED
    assert detail.incident.closed_at == T0 + minutes(10)
    assert detail.decided_at == T0 + minutes(3)
    assert [e.kind for e in detail.events] == [
        EventKind.DETECTED, EventKind.AWAITING_APPROVAL, EventKind.APPROVED,
        EventKind.REMEDIATION_STARTED, EventKind.VERIFYING, EventKind.RESOLVED,
    ]
    assert detail.events[2].actor == "alice"
    assert detail.events[2].detail["comment"] == "go"
    assert [d.actor_id for d in detail.decisions] == ["U1"]


def test_transition_from_wrong_state_names_the_winner(store: IncidentStore) -> None:
    incident_id = store.record_finding(finding()).incident.id
    _to_awaiting(store, incident_id)
    store.record_decision(incident_id, DecisionOutcome.REJECT, actor=BOB, now=T0)
    late = store.record_decision(incident_id, DecisionOutcome.APPROVE, actor=ALICE, now=T0)
    assert not late.applied
    assert late.status is S.REJECTED and late.status_by == "bob"
    assert late.decision is not None and late.decision.actor_id == "U2"
    assert late.decision.outcome is DecisionOutcome.REJECT
    assert len(store.get_incident(incident_id).decisions) == 1


def test_invalid_transition_is_refused_without_touching_the_database(store: IncidentStore) -> None:
    incident_id = store.record_finding(finding()).incident.id
    with pytest.raises(LifecycleError, match="open -> verifying"):
        store.transition(incident_id, S.OPEN, S.VERIFYING, actor="agent", now=T0)
    assert store.get_incident(incident_id).incident.status is S.OPEN


def test_unknown_incident(store: IncidentStore) -> None:
    with pytest.raises(IncidentNotFoundError, match="incident 999 not found"):
        store.transition(999, S.OPEN, S.AWAITING_APPROVAL, actor="a", now=T0)
    with pytest.raises(IncidentNotFoundError):
        store.get_incident(999)
    with pytest.raises(IncidentNotFoundError):
        store.add_event(999, EventKind.NOTE, now=T0)


def test_snooze_then_wake(store: IncidentStore) -> None:
    incident_id = store.record_finding(finding()).incident.id
    _to_awaiting(store, incident_id)
    until = T0 + timedelta(hours=4)
    result = store.record_decision(incident_id, DecisionOutcome.SNOOZE, actor=ALICE, now=T0,
                                   snoozed_until=until)
    assert result.applied
    assert store.get_incident(incident_id).snoozed_until == until
    assert store.transition(incident_id, S.SNOOZED, S.AWAITING_APPROVAL, actor="agent",
                            now=until).applied


@pytest.mark.parametrize(
    ("detected", "planned", "kept"),
    [
        (None, 38.0, 38.0),   # no figure at detection: the plan's measurement is kept
        (40.0, 38.0, 40.0),   # the detection's figure wins
        (None, None, None),   # no metrics at all
    ],
)
def test_utilization_before_from_the_plan_only_when_detection_had_none(
    store: IncidentStore, detected: float | None, planned: float | None, kept: float | None
) -> None:
    incident_id = store.record_finding(finding(utilization_now=detected, gpus=4)).incident.id
    store.record_action(incident_id, RemediationActionKind.PLAN, now=T0, actor="agent",
                        utilization_before=planned)
    assert store.get_incident(incident_id).incident.utilization_before == kept


def test_actions_and_notes_in_detail(store: IncidentStore) -> None:
    incident_id = store.record_finding(finding(utilization_now=40.0, gpus=4)).incident.id
    plan = {"patch": {"spec": {"runPolicy": {"suspend": True}}}, "target_zone": "zone-a"}
    store.record_action(incident_id, RemediationActionKind.PLAN, now=T0, actor="agent", payload=plan)
    store.record_action(incident_id, RemediationActionKind.DRY_RUN, now=T0, actor="agent", succeeded=True)
    store.record_action(incident_id, RemediationActionKind.VERIFY, now=T0 + minutes(20), actor="agent",
                        succeeded=True, utilization_after=85.0, message="co-located in zone-a")
    store.add_event(incident_id, EventKind.NOTE, now=T0 + minutes(21), actor="bob",
                    detail={"text": "looks good"})
    detail = store.get_incident(incident_id)
    assert [a.kind for a in detail.actions] == [RemediationActionKind.PLAN, RemediationActionKind.DRY_RUN,
                                                RemediationActionKind.VERIFY]
    assert detail.actions[0].payload == plan
    assert detail.incident.utilization_after == 85.0
    assert detail.events[-2].kind is EventKind.VERIFIED
    assert detail.events[-1].detail == {"text": "looks good"}


def test_list_filters_and_order(store: IncidentStore) -> None:
    a = store.record_finding(finding("a", at=T0)).incident.id
    b = store.record_finding(finding("b", at=T0 + minutes(1), verdict=Verdict.POLICY_BLOCKED)).incident.id
    c = store.record_finding(finding("c", namespace="vision", at=T0 + minutes(2))).incident.id
    store.transition(a, S.OPEN, S.SUPERSEDED, actor="agent", now=T0 + minutes(3))

    def listed(**kw: object) -> list[int]:
        return [i.id for i in store.list_incidents(IncidentQuery(**kw)).incidents]  # type: ignore[arg-type]

    assert listed() == [c, b, a]
    assert listed(namespace="ml") == [b, a]
    assert listed(namespace="ml", name="a") == [a]
    assert listed(status=S.SUPERSEDED) == [a]
    assert listed(verdict=Verdict.POLICY_BLOCKED) == [b]
    assert listed(since=T0 + minutes(1)) == [c, b]
    assert listed(open_only=True) == [c, b]
    assert listed(limit=1) == [c]


def test_open_counts_group_open_incidents_of_one_cluster(store: IncidentStore) -> None:
    a = store.record_finding(finding("a", at=T0)).incident.id
    store.record_finding(finding("b", at=T0))
    store.record_finding(finding("c", at=T0, verdict=Verdict.POLICY_BLOCKED))
    store.record_finding(finding("d", at=T0, cluster="other"))
    closed = store.record_finding(finding("e", at=T0)).incident.id
    store.transition(a, S.OPEN, S.AWAITING_APPROVAL, actor="agent", now=T0 + minutes(1))
    store.transition(closed, S.OPEN, S.SUPERSEDED, actor="agent", now=T0 + minutes(1))
    assert store.open_counts(cluster="prod") == {
        ("zone_split_blocked", "awaiting_approval"): 1,
        ("zone_split_blocked", "open"): 1,
        ("policy_blocked", "open"): 1,
    }
    assert store.open_counts(cluster="nowhere") == {}


def test_stats(store: IncidentStore) -> None:
    now = T0 + timedelta(days=2)
    resolved = store.record_finding(
        finding("a", at=T0, onset_at=T0 - minutes(2), utilization_now=40.0, gpus=8)
    ).incident.id
    _to_awaiting(store, resolved)
    store.record_decision(resolved, DecisionOutcome.APPROVE, actor=ALICE, now=T0 + minutes(10))
    store.transition(resolved, S.APPROVED, S.REMEDIATING, actor="agent", now=T0 + minutes(11))
    store.transition(resolved, S.REMEDIATING, S.VERIFYING, actor="agent", now=T0 + minutes(15))
    store.record_action(resolved, RemediationActionKind.VERIFY, now=T0 + minutes(30), succeeded=True,
                        utilization_after=85.0)
    store.transition(resolved, S.VERIFYING, S.RESOLVED, actor="agent", now=T0 + minutes(30))
    rejected = store.record_finding(
        finding("b", at=T0 + minutes(1), onset_at=T0 - minutes(3))
    ).incident.id
    _to_awaiting(store, rejected)
    store.record_decision(rejected, DecisionOutcome.REJECT, actor=BOB, now=T0 + minutes(31))
    store.record_finding(finding("c", at=T0 + minutes(2), verdict=Verdict.POLICY_BLOCKED))
    store.record_finding(finding("old", at=T0 - timedelta(days=40)))

    stats = store.stats(since=T0 - timedelta(days=30), now=now)
    assert stats.total == 3
    assert stats.by_verdict == {"policy_blocked": 1, "zone_split_blocked": 2}
    assert stats.by_outcome == {"open": 1, "rejected": 1, "resolved": 1}
    assert stats.mean_time_to_detect is not None
    assert abs(stats.mean_time_to_detect.total_seconds() - 180) < 0.5  # (120 + 240) / 2
    assert stats.mean_time_to_decide is not None
    assert abs(stats.mean_time_to_decide.total_seconds() - 1200) < 0.5  # (600 + 1800) / 2
    assert stats.mean_time_to_resolve is not None
    assert abs(stats.mean_time_to_resolve.total_seconds() - 1800) < 0.5
    expected = gpu_hours_recovered(gpus=8, utilization_before=40.0, utilization_after=85.0,
                                   resolved_at=T0 + minutes(30), until=now)
    assert expected > 0
    assert stats.gpu_hours_recovered == pytest.approx(expected)

    empty = store.stats(since=now, now=now + timedelta(days=1))
    assert empty.total == 0 and empty.mean_time_to_resolve is None
    assert empty.gpu_hours_recovered == 0.0


def test_purge_keeps_open_incidents_and_decisions(store: IncidentStore) -> None:
    old = store.record_finding(finding("old", at=T0)).incident.id
    _to_awaiting(store, old)
    store.record_decision(old, DecisionOutcome.REJECT, actor=BOB, now=T0 + minutes(1))
    store.enqueue_message(MessageKind.POST, payload={}, now=T0, incident_id=old)
    store.record_action(old, RemediationActionKind.PLAN, now=T0)
    still_open = store.record_finding(finding("open", at=T0)).incident.id
    recent = store.record_finding(finding("recent", at=T0)).incident.id
    store.transition(recent, S.OPEN, S.RESOLVED, actor="a", now=T0 + timedelta(days=100))

    # events of the old incident: detected, awaiting_approval, rejected, remediation_step
    result = store.purge(before=T0 + timedelta(days=10), batch=1)
    assert (result.incidents, result.events, result.actions, result.messages) == (1, 4, 1, 1)
    remaining = {i.id for i in store.list_incidents().incidents}
    assert remaining == {still_open, recent}
    with pytest.raises(IncidentNotFoundError):
        store.get_incident(old)
    with store.engine.connect() as conn:
        audit = conn.execute(text("SELECT incident_id, actor_id, job_name FROM decisions")).all()
    assert [tuple(r) for r in audit] == [(old, "U2", "old")]
    assert store.purge(before=T0 + timedelta(days=10)).incidents == 0


def _corrupt_json(store: IncidentStore, incident_id: int) -> None:
    # SQLite: text that is not JSON; PostgreSQL (JSONB validates): a JSON string, not an object.
    bad = "'{\"job\": ' " if store.engine.dialect.name == "sqlite" else "'\"oops\"'::jsonb"
    with store.engine.begin() as conn:
        conn.execute(text(f"UPDATE incidents SET diagnosis = {bad} WHERE id = :id"),
                     {"id": incident_id})


def test_corrupt_json_names_the_incident_and_spares_the_listing(store: IncidentStore) -> None:
    good = store.record_finding(finding("good")).incident.id
    bad = store.record_finding(finding("bad")).incident.id
    _corrupt_json(store, bad)
    listing = store.list_incidents()
    assert {i.id for i in listing.incidents} == {good, bad}
    with pytest.raises(CorruptRecordError, match=f"incident {bad} cannot be read: column diagnosis"):
        store.get_incident(bad)
    assert store.get_incident(good).incident.id == good


def test_unknown_status_is_reported_not_fatal(store: IncidentStore) -> None:
    good = store.record_finding(finding("good")).incident.id
    bad = store.record_finding(finding("bad")).incident.id
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE incidents SET status = 'exploded' WHERE id = :id"), {"id": bad})
    listing = store.list_incidents()
    assert [i.id for i in listing.incidents] == [good]
    assert [str(p) for p in listing.problems] == [
        f"incident {bad}: unknown status value 'exploded'"
    ]
    with pytest.raises(CorruptRecordError, match=f"incident {bad}.*'exploded'"):
        store.get_incident(bad)
    with pytest.raises(CorruptRecordError, match=f"incident {bad}"):
        store.transition(bad, S.OPEN, S.AWAITING_APPROVAL, actor="a", now=T0)
    assert store.stats(since=T0 - timedelta(days=1), now=T0 + minutes(1)).total == 2
    assert [s.id for s, _ in store.incidents_to_resume()] == [good]


def test_incidents_to_resume(store: IncidentStore) -> None:
    ids = {}
    for name, path in {
        "open": [],
        "awaiting": [S.AWAITING_APPROVAL],
        "approved": [S.AWAITING_APPROVAL, S.APPROVED],
        "remediating": [S.AWAITING_APPROVAL, S.APPROVED, S.REMEDIATING],
        "done": [S.RESOLVED],
    }.items():
        incident_id = store.record_finding(finding(name)).incident.id
        current = S.OPEN
        for nxt in path:
            assert store.transition(incident_id, current, nxt, actor="a", now=T0).applied
            current = nxt
        ids[name] = incident_id
    resume = {s.id: action for s, action in store.incidents_to_resume()}
    assert resume == {
        ids["open"]: ResumeAction.NOTIFY,
        ids["awaiting"]: ResumeAction.AWAIT_DECISION,
        ids["approved"]: ResumeAction.START_REMEDIATION,
        ids["remediating"]: ResumeAction.REAPPLY_AND_VERIFY,
    }


def test_ping_and_readiness(store: IncidentStore) -> None:
    assert not store.ready()  # nothing contacted yet
    assert store.ping() and store.ready()


def test_utc_now_edge_is_not_needed(store: IncidentStore) -> None:
    # Times are always passed in: an explicit far-future time is stored as given.
    future = datetime(2099, 1, 1, tzinfo=UTC)
    assert store.record_finding(finding(at=future)).incident.opened_at == future


def test_non_transient_database_errors_are_named(store: IncidentStore) -> None:
    outbox = metadata.tables["outbox_messages"]
    with store.engine.begin() as conn:
        outbox.drop(conn)
    try:
        with pytest.raises(StoreError, match="enqueue message failed") as caught:
            store.enqueue_message(MessageKind.POST, payload={}, now=T0)
        assert "\n" not in str(caught.value)
    finally:
        with store.engine.begin() as conn:  # the PostgreSQL database is shared by the run
            outbox.create(conn)


def test_snooze_needs_an_end(store: IncidentStore) -> None:
    incident_id = store.record_finding(finding()).incident.id
    _to_awaiting(store, incident_id)
    with pytest.raises(LifecycleError, match="snoozed_until"):
        store.record_decision(incident_id, DecisionOutcome.SNOOZE, actor=ALICE, now=T0)
    with pytest.raises(LifecycleError, match="snoozed_until"):
        store.record_decision(incident_id, DecisionOutcome.APPROVE, actor=ALICE, now=T0,
                              snoozed_until=T0)
    with pytest.raises(LifecycleError, match="snoozed_until 2026-11-01T12:00:00\\+00:00 is not after"):
        store.record_decision(incident_id, DecisionOutcome.SNOOZE, actor=ALICE, now=T0,
                              snoozed_until=T0)
    assert store.get_incident(incident_id).incident.status is S.AWAITING_APPROVAL


@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize(
    ("created", "bound"),
    [
        (T0 - minutes(10), True),  # the job created before the incident's first evidence
        (T0, True),
        (T0 + minutes(2), False),  # created after it: another job of that name
        (None, False),  # creation time unknown: never bound on a guess
    ],
)
def test_a_redetection_fills_in_the_uid_only_of_the_job_created_by_the_first_evidence(
    store: IncidentStore, batched: bool, created: datetime | None, bound: bool
) -> None:
    """An incident recorded without its job's uid (the object not cached yet) takes the uid a
    re-detection knows, when that job was created by the incident's first evidence; a uid once
    recorded is never replaced."""
    first = store.record_finding(replace(finding(), uid=None)).incident
    assert first.uid is None
    again = replace(finding(uid="uid-1", at=T0 + minutes(3)), job_created_at=created)
    if batched:
        store.record_findings([again])
    else:
        store.record_finding(again)
    assert store.get_incident(first.id).incident.uid == ("uid-1" if bound else None)
    store.record_finding(replace(finding(uid="uid-2", at=T0 + minutes(4)), job_created_at=T0))
    assert store.get_incident(first.id).incident.uid == ("uid-1" if bound else "uid-2")


def test_bind_job_uid_binds_once_and_says_to_what(store: IncidentStore) -> None:
    incident_id = store.record_finding(replace(finding(), uid=None)).incident.id
    assert store.bind_job_uid(incident_id, "uid-1", now=T0, actor="zonemedic") == "uid-1"
    assert store.bind_job_uid(incident_id, "uid-2", now=T0, actor="zonemedic") == "uid-1"
    notes = [e for e in store.get_incident(incident_id).events if e.kind is EventKind.NOTE]
    assert [e.detail["uid"] for e in notes] == ["uid-1"]
    assert store.bind_job_uid(incident_id + 99, "uid-1", now=T0, actor="zonemedic") is None
