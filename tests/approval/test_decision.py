"""The decision rules, pure and table-driven: what is decidable, what each refusal says, what a
malformed request is."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agent.approval.decision import (
    DEFAULT_SNOOZE,
    DecisionError,
    DecisionReason,
    DecisionRequest,
    IncidentState,
    judge,
    recorded,
    validate,
    when,
)
from agent.model.incident import Actor, Decision, TransitionResult
from agent.model.lifecycle import DecisionOutcome, DecisionSource, IncidentStatus

S = IncidentStatus
D = DecisionOutcome
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
EARLIER = NOW - timedelta(minutes=3)
ALICE = Actor("U1", "alice", DecisionSource.SLACK)
BOB = Actor("bob", None, DecisionSource.CLI)


def _decision(outcome: D, actor: Actor = ALICE, at: datetime = EARLIER) -> Decision:
    return Decision(id=1, incident_id=7, outcome=outcome, actor_id=actor.id, actor_name=actor.name,
                    source=actor.source, decided_at=at, comment=None, job="ml/resnet")


def _state(status: S, *, decision: Decision | None = None, deadline: datetime | None = None,
           by: str | None = "zonemedic") -> IncidentState:
    return IncidentState(incident_id=7, status=status, status_by=by, updated_at=EARLIER,
                         approval_deadline=deadline, decision=decision)


def _request(outcome: D = D.APPROVE, **kw: object) -> DecisionRequest:
    return DecisionRequest(incident_id=7, outcome=outcome, actor=BOB, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("state", "reason", "by", "at", "words"),
    [
        # decidable: None means "try the conditional transition"
        (_state(S.OPEN), None, None, None, ()),
        (_state(S.AWAITING_APPROVAL, deadline=NOW + timedelta(seconds=1)), None, None, None, ()),
        # a snooze that ended brought it back: decidable again despite the old decision
        (_state(S.AWAITING_APPROVAL, decision=_decision(D.SNOOZE)), None, None, None, ()),
        # past the deadline (or exactly at it): expired, even before the expiry job ran
        (_state(S.AWAITING_APPROVAL, deadline=NOW), DecisionReason.EXPIRED, None, NOW,
         ("expired", "deadline passed at 2026-11-30 12:00:00 UTC")),
        (_state(S.AWAITING_APPROVAL, deadline=NOW - timedelta(hours=1)), DecisionReason.EXPIRED,
         None, NOW - timedelta(hours=1), ("deadline passed at 2026-11-30 11:00:00 UTC",)),
        (_state(S.EXPIRED), DecisionReason.EXPIRED, "zonemedic", EARLIER,
         ("expired at 2026-11-30 11:57:00 UTC",)),
        # already decided: name the winner, when, and how
        (_state(S.APPROVED, decision=_decision(D.APPROVE), by="alice"),
         DecisionReason.ALREADY_DECIDED, "alice", EARLIER,
         ("already approved by alice (via slack) at 2026-11-30 11:57:00 UTC",)),
        (_state(S.REJECTED, decision=_decision(D.REJECT, BOB), by="bob"),
         DecisionReason.ALREADY_DECIDED, "bob", EARLIER, ("already rejected by bob (via cli)",)),
        (_state(S.SNOOZED, decision=_decision(D.SNOOZE)), DecisionReason.ALREADY_DECIDED, "alice",
         EARLIER, ("already snoozed by alice",)),
        (_state(S.REMEDIATING, decision=_decision(D.APPROVE)), DecisionReason.ALREADY_DECIDED,
         "alice", EARLIER, ("already approved by alice", "it is now remediating")),
        (_state(S.RESOLVED, decision=_decision(D.APPROVE)), DecisionReason.ALREADY_DECIDED,
         "alice", EARLIER, ("it is now resolved",)),
        (_state(S.FAILED, decision=_decision(D.APPROVE)), DecisionReason.ALREADY_DECIDED,
         "alice", EARLIER, ("it is now failed",)),
        # closed without a decision, or the job changed: not current
        (_state(S.RESOLVED), DecisionReason.NOT_CURRENT, "zonemedic", EARLIER,
         ("no longer current: resolved by zonemedic at 2026-11-30 11:57:00 UTC",)),
        (_state(S.SUPERSEDED), DecisionReason.NOT_CURRENT, "zonemedic", EARLIER,
         ("no longer current: superseded",)),
        (_state(S.SUPERSEDED, decision=_decision(D.SNOOZE)), DecisionReason.NOT_CURRENT,
         "zonemedic", EARLIER, ("superseded",)),
        (_state(S.RESOLVED, by=None), DecisionReason.NOT_CURRENT, None, EARLIER,
         ("resolved by zonemedic",)),
    ],
)
def test_judge(state: IncidentState, reason: DecisionReason | None, by: str | None,
               at: datetime | None, words: tuple[str, ...]) -> None:
    for outcome in D:
        result = judge(state, _request(outcome), now=NOW)
        if reason is None:
            assert result is None
            continue
        assert result is not None
        assert (result.recorded, result.reason, result.status) == (False, reason, state.status)
        assert (result.decided_by, result.decided_at) == (by, at)
        assert result.outcome is outcome
        for word in words:
            assert word in result.message, result.message
        assert result.message.endswith("nothing changed")
        assert "\n" not in result.message


@pytest.mark.parametrize(
    ("request_", "error"),
    [
        (DecisionRequest(0, D.APPROVE, BOB), "incident id: expected a positive number, got 0"),
        (DecisionRequest(-3, D.APPROVE, BOB), "incident id"),
        (DecisionRequest(7, D.APPROVE, Actor(" ", None, DecisionSource.CLI)), "by: "),
        (DecisionRequest(7, D.APPROVE, Actor("x" * 254, None, DecisionSource.CLI)), "by: at most"),
        (DecisionRequest(7, D.APPROVE, BOB, reason="r" * 2001), "reason: at most 2000"),
        (DecisionRequest(7, D.APPROVE, BOB, snooze_for=timedelta(hours=1)),
         "snooze_for: only a snooze"),
        (DecisionRequest(7, D.SNOOZE, BOB, snooze_for=timedelta(0)), "snooze_for: expected"),
        (DecisionRequest(7, D.SNOOZE, BOB, snooze_for=timedelta(seconds=-1)), "snooze_for"),
        (DecisionRequest(7, D.SNOOZE, BOB, snooze_for=timedelta(days=91)),
         "snooze_for: expected a duration above 0 and at most 90d, got 7862400s"),
    ],
)
def test_validate_refuses(request_: DecisionRequest, error: str) -> None:
    with pytest.raises(DecisionError, match="^" + error.replace("(", r"\(")):
        validate(request_)


@pytest.mark.parametrize(
    "request_",
    [
        DecisionRequest(7, D.APPROVE, BOB),
        DecisionRequest(7, D.REJECT, ALICE, reason="not now" * 200),
        DecisionRequest(7, D.SNOOZE, BOB),
        DecisionRequest(7, D.SNOOZE, BOB, snooze_for=timedelta(days=90)),
    ],
)
def test_validate_accepts(request_: DecisionRequest) -> None:
    validate(request_)


@pytest.mark.parametrize(
    ("outcome", "snooze_for", "until", "message"),
    [
        (D.APPROVE, None, None, "incident 7 approved by bob"),
        (D.REJECT, None, None, "incident 7 rejected by bob"),
        (D.SNOOZE, None, NOW + DEFAULT_SNOOZE,
         "incident 7 snoozed by bob until 2026-12-01 12:00:00 UTC"),
        (D.SNOOZE, timedelta(hours=2), NOW + timedelta(hours=2),
         "incident 7 snoozed by bob until 2026-11-30 14:00:00 UTC"),
    ],
)
def test_recorded(outcome: D, snooze_for: timedelta | None, until: datetime | None,
                  message: str) -> None:
    request = DecisionRequest(7, outcome, BOB, snooze_for=snooze_for)
    assert request.snoozed_until(NOW) == until
    transition = TransitionResult(7, True, S.APPROVED, "bob", previous=S.OPEN)
    result = recorded(request, transition, now=NOW)
    assert (result.recorded, result.reason, result.decided_by, result.decided_at) == (
        True, DecisionReason.RECORDED, "bob", NOW)
    assert result.snoozed_until == until
    assert result.message == message


def test_when_is_utc() -> None:
    from datetime import timezone

    assert when(datetime(2026, 11, 30, 14, 0, tzinfo=timezone(timedelta(hours=2)))) == (
        "2026-11-30 12:00:00 UTC")
