"""The pure incident lifecycle (agent.model.lifecycle): transitions table, dedupe classes and
fingerprints, resume rules, backoff, the GPU-hours estimate and JSON conversion (table-driven)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agent.model.incident import IncidentStats, RecordProblem
from agent.model.lifecycle import (
    DECIDABLE,
    DECISION_STATUS,
    OPEN_STATUSES,
    TERMINAL,
    TRANSITIONS,
    IncidentStatus,
    LifecycleError,
    Redetected,
    ResumeAction,
    Severity,
    VerdictClass,
    can_transition,
    check_transition,
    default_severity,
    egress_saved,
    event_for_status,
    fingerprint,
    gpu_hours_recovered,
    refused_redetection,
    resume_action,
    retry_delay,
    to_jsonable,
    verdict_class,
)
from agent.model.verdict import Verdict

NOW = datetime(2026, 11, 1, tzinfo=UTC)
S = IncidentStatus


@pytest.mark.parametrize(
    ("current", "new", "allowed"),
    [
        (S.OPEN, S.AWAITING_APPROVAL, True),
        (S.OPEN, S.APPROVED, True),  # auto-approval policy, or decided before being asked
        (S.OPEN, S.REJECTED, True),
        (S.OPEN, S.SNOOZED, True),
        (S.OPEN, S.EXPIRED, True),  # open with an approval deadline that passed
        (S.SNOOZED, S.APPROVED, False),  # a snoozed incident wakes before it is decided
        (S.SNOOZED, S.EXPIRED, True),
        (S.AWAITING_APPROVAL, S.APPROVED, True),
        (S.AWAITING_APPROVAL, S.REJECTED, True),
        (S.AWAITING_APPROVAL, S.SNOOZED, True),
        (S.AWAITING_APPROVAL, S.EXPIRED, True),
        (S.SNOOZED, S.AWAITING_APPROVAL, True),
        (S.APPROVED, S.REMEDIATING, True),
        (S.REMEDIATING, S.VERIFYING, True),
        (S.REMEDIATING, S.ROLLED_BACK, True),
        (S.VERIFYING, S.RESOLVED, True),
        (S.VERIFYING, S.ROLLED_BACK, True),
        (S.OPEN, S.RESOLVED, True),  # healed by itself
        (S.OPEN, S.SUPERSEDED, True),
        (S.OPEN, S.REMEDIATING, False),  # never without a decision
        (S.AWAITING_APPROVAL, S.REMEDIATING, False),
        (S.APPROVED, S.APPROVED, False),  # a second approval is no transition
        (S.APPROVED, S.REJECTED, False),
        (S.REMEDIATING, S.RESOLVED, False),  # only after verification
        (S.REJECTED, S.APPROVED, False),
        (S.RESOLVED, S.OPEN, False),
        # an approved fix refused by a guard or the plan, nothing written: the incident stays open
        (S.APPROVED, S.REFUSED, True),
        (S.REMEDIATING, S.REFUSED, True),  # guards checked again before the first write
        (S.VERIFYING, S.REFUSED, False),  # written already: a refusal is no longer possible
        (S.REFUSED, S.RESOLVED, True),  # the job healthy
        (S.REFUSED, S.SUPERSEDED, True),  # the job gone or recreated, or a new problem
        (S.REFUSED, S.APPROVED, False),  # never approved again: a new problem asks again
        (S.REFUSED, S.FAILED, False),  # a refusal never closes the problem's incident
        (S.OPEN, S.REFUSED, False),  # only an approved fix is refused
    ],
)
def test_transitions_table(current: S, new: S, allowed: bool) -> None:
    assert can_transition(current, new) is allowed
    if allowed:
        check_transition(current, new)
    else:
        with pytest.raises(LifecycleError, match=f"{current.value} -> {new.value}"):
            check_transition(current, new)


def test_every_status_is_in_the_table_and_can_end() -> None:
    assert set(TRANSITIONS) == set(IncidentStatus)
    assert {S.RESOLVED, S.REJECTED, S.EXPIRED, S.FAILED, S.ROLLED_BACK, S.SUPERSEDED} == TERMINAL
    assert OPEN_STATUSES.isdisjoint(TERMINAL)
    for status in OPEN_STATUSES:  # every open status can reach a terminal one
        seen, frontier = {status}, [status]
        while frontier:
            for nxt in TRANSITIONS[frontier.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    frontier.append(nxt)
        assert seen & TERMINAL, status
    reachable = {S.OPEN}
    frontier = [S.OPEN]
    while frontier:
        for nxt in TRANSITIONS[frontier.pop()] - reachable:
            reachable.add(nxt)
            frontier.append(nxt)
    assert reachable == set(IncidentStatus)


def test_every_decision_is_a_transition_from_every_decidable_status() -> None:
    assert {S.OPEN, S.AWAITING_APPROVAL} == DECIDABLE
    for status in DECIDABLE:
        for outcome, target in DECISION_STATUS.items():
            assert can_transition(status, target), (status, outcome)
    for status in OPEN_STATUSES - DECIDABLE:  # snoozed, approved, remediating, verifying
        assert not any(can_transition(status, t) for t in DECISION_STATUS.values()), status


def test_every_status_has_an_event() -> None:
    assert {event_for_status(s).value for s in S} >= {"approved", "rejected", "resolved"}


def test_a_refused_incident_is_open_and_not_decidable() -> None:
    assert S.REFUSED in OPEN_STATUSES and S.REFUSED not in DECIDABLE
    assert event_for_status(S.REFUSED).value == "refused"


B, D, P, M = (Verdict.ZONE_SPLIT_BLOCKED, Verdict.ZONE_SPLIT_DEGRADED, Verdict.POLICY_BLOCKED,
              Verdict.GPU_UTILIZATION_DROP)


@pytest.mark.parametrize(
    ("current", "seen", "same_job", "fixable", "fate", "words"),
    [
        # the refused, unchanged problem: folds into the incident, whatever the reason refused
        (B, B, True, False, Redetected.FOLD, "unchanged"),
        (D, B, True, False, Redetected.FOLD, "unchanged"),  # same class, another severity
        (B, D, True, False, Redetected.FOLD, "unchanged"),
        (M, M, True, False, Redetected.FOLD, "unchanged"),
        # a new problem: the job recreated, another verdict class, a fix no guard refuses now
        (B, B, False, False, Redetected.REOPEN, "recreated"),
        (B, B, False, True, Redetected.REOPEN, "recreated"),
        (B, P, True, False, Redetected.REOPEN, "policy_blocked"),
        (D, M, True, False, Redetected.REOPEN, "gpu_utilization_drop"),
        (B, B, True, True, Redetected.REOPEN, "no longer holds"),
        (D, B, True, True, Redetected.REOPEN, "no longer holds"),
    ],
)
def test_refused_redetection(current: Verdict, seen: Verdict, same_job: bool, fixable: bool,
                             fate: Redetected, words: str) -> None:  # fmt: skip
    got, why = refused_redetection(current=current, seen=seen, same_job=same_job,
                                   fixable=fixable)  # fmt: skip
    assert got is fate and words in why


def test_refused_redetection_of_what_is_no_incident_is_an_error() -> None:
    with pytest.raises(LifecycleError, match="healthy"):
        refused_redetection(current=B, seen=Verdict.HEALTHY, same_job=True, fixable=False)


@pytest.mark.parametrize(
    ("status", "action"),
    [
        (S.OPEN, ResumeAction.NOTIFY),
        (S.AWAITING_APPROVAL, ResumeAction.AWAIT_DECISION),
        (S.SNOOZED, ResumeAction.AWAIT_SNOOZE_END),
        (S.APPROVED, ResumeAction.START_REMEDIATION),
        (S.REMEDIATING, ResumeAction.REAPPLY_AND_VERIFY),
        (S.VERIFYING, ResumeAction.VERIFY),
        (S.RESOLVED, ResumeAction.NONE),
        (S.ROLLED_BACK, ResumeAction.NONE),
        (S.REFUSED, ResumeAction.NONE),  # nothing to redo: it waits for the problem to end
    ],
)
def test_resume_rules(status: S, action: ResumeAction) -> None:
    assert resume_action(status) is action


@pytest.mark.parametrize(
    ("verdict", "klass", "severity"),
    [
        (Verdict.ZONE_SPLIT_BLOCKED, VerdictClass.ZONE_SPLIT, Severity.CRITICAL),
        (Verdict.ZONE_SPLIT_DEGRADED, VerdictClass.ZONE_SPLIT, Severity.WARNING),
        (Verdict.POLICY_BLOCKED, VerdictClass.POLICY_BLOCKED, Severity.CRITICAL),
        (Verdict.GPU_UTILIZATION_DROP, VerdictClass.GPU_UTILIZATION_DROP, Severity.WARNING),
        (Verdict.ALERT, VerdictClass.ALERT, Severity.WARNING),
    ],
)
def test_verdict_classes(verdict: Verdict, klass: VerdictClass, severity: Severity) -> None:
    assert verdict_class(verdict) is klass
    assert default_severity(verdict) is severity


@pytest.mark.parametrize("verdict", [Verdict.HEALTHY, Verdict.PENDING])
def test_healthy_and_pending_are_not_incidents(verdict: Verdict) -> None:
    with pytest.raises(LifecycleError, match=verdict.value):
        verdict_class(verdict)


BASE = {"cluster": "prod", "kind": "PyTorchJob", "namespace": "ml", "name": "resnet", "uid": "u1",
        "verdict": Verdict.ZONE_SPLIT_BLOCKED}


@pytest.mark.parametrize(
    ("change", "same"),
    [
        ({"verdict": Verdict.ZONE_SPLIT_DEGRADED}, True),
        ({"name": "renamed"}, True),  # the uid identifies the job when present
        ({"verdict": Verdict.POLICY_BLOCKED}, False),
        ({"cluster": "staging"}, False),
        ({"uid": "u2"}, False),
        ({"uid": None}, False),
    ],
)
def test_fingerprint(change: dict[str, object], same: bool) -> None:
    a = fingerprint(**BASE)  # type: ignore[arg-type]
    b = fingerprint(**{**BASE, **change})  # type: ignore[arg-type]
    assert (a == b) is same
    assert len(a) == 40 and a == fingerprint(**BASE)  # type: ignore[arg-type]


def test_fingerprint_without_uid_uses_the_name() -> None:
    no_uid = {**BASE, "uid": None}
    assert fingerprint(**no_uid) != fingerprint(**{**no_uid, "name": "other"})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("attempts", "expected"),
    [(0, 0), (1, 5), (2, 10), (3, 20), (4, 40), (5, 60), (50, 60)],
)
def test_retry_delay(attempts: int, expected: int) -> None:
    delay = retry_delay(attempts, base=timedelta(seconds=5), cap=timedelta(seconds=60))
    assert delay == timedelta(seconds=expected)


@pytest.mark.parametrize(
    ("gpus", "before", "after", "hours", "expected"),
    [
        (8, 40.0, 85.0, 10, 8 * 0.45 * 10),
        (4, 40.0, 30.0, 10, 0.0),  # got worse: nothing recovered
        (None, 40.0, 85.0, 10, 0.0),
        (8, None, 85.0, 10, 0.0),
        (8, 40.0, None, 10, 0.0),
        (8, 40.0, 85.0, -1, 0.0),  # resolved after the window
    ],
)
def test_gpu_hours_recovered(
    gpus: int | None, before: float | None, after: float | None, hours: int, expected: float
) -> None:
    got = gpu_hours_recovered(gpus=gpus, utilization_before=before, utilization_after=after,
                              resolved_at=NOW, until=NOW + timedelta(hours=hours))
    assert got == pytest.approx(expected)


@pytest.mark.parametrize(
    ("per_day", "hours", "expected"),
    [(6.0, 48, 12.0), (6.0, 0, 0.0), (6.0, -5, 0.0), (None, 48, 0.0), (-1.0, 24, 0.0)],
)
def test_egress_saved(per_day: float | None, hours: int, expected: float) -> None:
    got = egress_saved(per_day, resolved_at=NOW, until=NOW + timedelta(hours=hours))
    assert got == pytest.approx(expected)


EGRESS_KEYS = ("measured_usd", "measured_gb", "measured_incidents", "estimated_usd",
               "estimated_gb", "estimated_incidents")


def test_to_jsonable() -> None:
    stats = IncidentStats(
        since=NOW, until=NOW + timedelta(days=1), total=2, by_verdict={"zone_split_blocked": 2},
        by_outcome={"open": 2}, mean_time_to_detect=timedelta(seconds=90),
        mean_time_to_decide=None, mean_time_to_resolve=None, gpu_hours_recovered=1.5,
    )
    assert to_jsonable(stats) == {
        "since": "2026-11-01T00:00:00+00:00", "until": "2026-11-02T00:00:00+00:00", "total": 2,
        "by_verdict": {"zone_split_blocked": 2}, "by_outcome": {"open": 2},
        "mean_time_to_detect": 90.0, "mean_time_to_decide": None, "mean_time_to_resolve": None,
        "gpu_hours_recovered": 1.5,
        "egress_per_day_open": dict.fromkeys(EGRESS_KEYS, 0),
        "egress_saved": dict.fromkeys(EGRESS_KEYS, 0),
    }
    problem = RecordProblem(7, "unknown status value 'x'")
    assert to_jsonable([problem, (S.OPEN, Verdict.ALERT)]) == [
        {"incident_id": 7, "problem": "unknown status value 'x'"}, ["open", "alert"]]
