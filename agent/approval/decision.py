"""The one decision function: approve, reject or snooze an incident, from wherever the decision comes.

Who calls it: the CLI (`zonemedic incidents approve|reject|snooze`), the chat layer (Slack buttons),
the HTTP API (`POST /api/incidents/{id}/decision`) and the pipeline for playbooks' `auto` approval.
Every caller passes a `DecisionRequest` and gets a `DecisionResult`; none of them talks to the
store's decision method directly, so every path follows the same rules:

- An incident is decidable while it is `open` or `awaiting_approval`, and not past its approval
  deadline. A decision is recorded as the store's conditional transition from the status the
  incident is in (one winner among concurrent deciders, replicas and processes alike).
- A decision that finds the incident already decided (approved, rejected, snoozed, or further along
  after one of those) records nothing and says who decided and when (`ALREADY_DECIDED`).
- An incident past its approval deadline (the store's `approval_deadline`), or already `expired`,
  records nothing (`EXPIRED`); the leader's expiry job moves it to `expired` (and the store expires
  it itself when the deadline passes between this function's read and its write).
- An incident that is closed without a decision (resolved by re-diagnosis, superseded because its
  job changed or went away) records nothing (`NOT_CURRENT`), naming who closed it and when.
- An unknown id records nothing (`NOT_FOUND`).
- A decider who is not an approver in force now (`agent.approval.approvers`: the configured
  approvers, read at decision time, never those recorded when the incident opened) records no
  decision (`NOT_AUTHORIZED`, saying why); the refusal is audited as a `note` on the incident's
  timeline. This is checked before the incident's state, for every source alike.
- A snooze lasts `snooze_for` (24 hours when not given); only a snooze has a duration.

The rules are pure (`validate`, `judge`, `recorded`): plain data in, a `DecisionResult` or None out,
`now` passed in. `decide` is the thin part that reads the incident, asks `judge`, and applies the
store's conditional transition; when it loses a race it reads again and judges again (the incident
may only have moved from `open` to `awaiting_approval`, which is still decidable).

What it does not do: authenticate (Slack's signature, the API's bearer token, access to the
database are the callers'), execute a remediation (the leader's remediation queue,
`agent.runtime.remediation_queue`, picks up `approved` incidents), parse an HTTP body
(`agent.runtime.decision_http`) or CLI flags (`agent.commands.decisions`), or render anything
beyond a one-line message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from agent.approval.approvers import Authorization, refusal_note
from agent.errors import InputError
from agent.model.incident import Actor, Decision, IncidentDetail, TransitionResult
from agent.model.lifecycle import (
    DECIDABLE,
    DECISION_STATUS,
    DecisionOutcome,
    EventKind,
    IncidentStatus,
)
from agent.store.errors import IncidentNotFoundError

S = IncidentStatus

DEFAULT_SNOOZE = timedelta(hours=24)
MAX_SNOOZE = timedelta(days=90)
MAX_REASON = 2000
MAX_ACTOR = 253  # the store's actor columns
ATTEMPTS = 5  # read-judge-write rounds before giving up on an incident that keeps moving

# Statuses an incident reaches only through (or after) a decision: deciding again is "already
# decided". `resolved` is here because a remediated incident ends resolved; a resolved incident
# without any decision healed by itself and is "not current".
_AFTER_DECISION: frozenset[IncidentStatus] = frozenset(
    {S.APPROVED, S.REJECTED, S.SNOOZED, S.REMEDIATING, S.VERIFYING, S.FAILED, S.ROLLED_BACK,
     S.RESOLVED, S.REFUSED}
)

_PAST: dict[DecisionOutcome, str] = {
    DecisionOutcome.APPROVE: "approved",
    DecisionOutcome.REJECT: "rejected",
    DecisionOutcome.SNOOZE: "snoozed",
}


class DecisionError(InputError):
    """A decision request that is malformed (empty actor, bad snooze duration, reason too long)."""


class DecisionReason(StrEnum):
    """Why a decision was or was not recorded."""

    RECORDED = "recorded"
    ALREADY_DECIDED = "already_decided"
    NOT_CURRENT = "not_current"  # closed without a decision: resolved, superseded, ...
    EXPIRED = "expired"  # past its approval deadline, or already expired
    NOT_FOUND = "not_found"
    NOT_AUTHORIZED = "not_authorized"  # the decider is not an approver in force now


@dataclass(frozen=True)
class DecisionRequest:
    """One decision, from any source (`actor.source` says which)."""

    incident_id: int
    outcome: DecisionOutcome
    actor: Actor
    reason: str | None = None
    snooze_for: timedelta | None = None  # snooze only; DEFAULT_SNOOZE when None

    def snoozed_until(self, now: datetime) -> datetime | None:
        if self.outcome is not DecisionOutcome.SNOOZE:
            return None
        return now + (self.snooze_for if self.snooze_for is not None else DEFAULT_SNOOZE)


@dataclass(frozen=True)
class DecisionResult:
    """What `decide` did. `recorded` is True for the one caller whose decision was recorded.

    `status` is the incident's status afterwards (None when there is no such incident);
    `decided_by` / `decided_at` name who put it there and when: this caller when recorded, the
    winning decider when already decided, whoever closed or expired it otherwise. `decision` is
    the recorded decision (this caller's, or the one that won). `message` is one line for people.
    """

    incident_id: int
    outcome: DecisionOutcome
    recorded: bool
    reason: DecisionReason
    status: IncidentStatus | None
    decided_by: str | None
    decided_at: datetime | None
    message: str
    decision: Decision | None = None
    snoozed_until: datetime | None = None


@dataclass(frozen=True)
class IncidentState:
    """What the rules need to know about an incident, read just before deciding."""

    incident_id: int
    status: IncidentStatus
    status_by: str | None
    updated_at: datetime
    approval_deadline: datetime | None
    decision: Decision | None  # the latest recorded decision, if any

    @classmethod
    def of(cls, detail: IncidentDetail) -> IncidentState:
        incident = detail.incident
        return cls(
            incident_id=incident.id,
            status=incident.status,
            status_by=incident.status_by,
            updated_at=incident.updated_at,
            approval_deadline=incident.approval_deadline,
            decision=latest(detail.decisions),
        )


class Authorizer(Protocol):
    """Who may decide now (`agent.approval.approvers.Authority`)."""

    def authorize(self, detail: IncidentDetail, actor: Actor) -> Authorization: ...


class DecisionStore(Protocol):
    """What `decide` uses of the incident store (`agent.store.repository.IncidentStore`)."""

    def get_incident(self, incident_id: int) -> IncidentDetail: ...

    def add_event(
        self,
        incident_id: int,
        kind: EventKind,
        *,
        now: datetime,
        actor: str | None = ...,
        detail: Mapping[str, Any] | None = ...,
    ) -> Any: ...

    def record_decision(
        self,
        incident_id: int,
        outcome: DecisionOutcome,
        *,
        actor: Actor,
        now: datetime,
        comment: str | None = ...,
        expected: IncidentStatus = ...,
        snoozed_until: datetime | None = ...,
    ) -> TransitionResult: ...


# --------------------------------------------------------------------------------------------
# the rules (pure)


def latest(decisions: Sequence[Decision]) -> Decision | None:
    return max(decisions, key=lambda d: (d.decided_at, d.id)) if decisions else None


def when(at: datetime) -> str:
    """A time for people: `2026-11-30 12:01:02 UTC`."""
    return f"{at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


def validate(request: DecisionRequest) -> None:
    """Raise `DecisionError` naming the field when the request cannot be a decision."""
    if request.incident_id < 1:
        raise DecisionError(f"incident id: expected a positive number, got {request.incident_id}")
    if not request.actor.id.strip():
        raise DecisionError("by: who decides must not be empty")
    if len(request.actor.id) > MAX_ACTOR or len(request.actor.name or "") > MAX_ACTOR:
        raise DecisionError(f"by: at most {MAX_ACTOR} characters")
    if request.reason is not None and len(request.reason) > MAX_REASON:
        raise DecisionError(f"reason: at most {MAX_REASON} characters, got {len(request.reason)}")
    if request.snooze_for is not None:
        if request.outcome is not DecisionOutcome.SNOOZE:
            raise DecisionError(f"snooze_for: only a snooze has a duration, not {request.outcome}")
        if not timedelta(0) < request.snooze_for <= MAX_SNOOZE:
            raise DecisionError(
                f"snooze_for: expected a duration above 0 and at most {MAX_SNOOZE.days}d, got "
                f"{request.snooze_for.total_seconds():.0f}s"
            )


def _decided_line(incident_id: int, decision: Decision, status: IncidentStatus) -> str:
    who = decision.actor_name or decision.actor_id
    now_status = "" if status is DECISION_STATUS[decision.outcome] else f"; it is now {status}"
    return (
        f"incident {incident_id} was already {_PAST[decision.outcome]} by {who} "
        f"(via {decision.source}) at {when(decision.decided_at)}{now_status}; nothing changed"
    )


def judge(
    state: IncidentState, request: DecisionRequest, *, now: datetime
) -> DecisionResult | None:
    """The refusal for deciding `request` on an incident in `state`, or None: go ahead and try the
    conditional transition from `state.status`."""

    def refuse(reason: DecisionReason, message: str, *, by: str | None, at: datetime | None,
               decision: Decision | None = None) -> DecisionResult:
        return DecisionResult(
            incident_id=state.incident_id, outcome=request.outcome, recorded=False,
            reason=reason, status=state.status, decided_by=by, decided_at=at, message=message,
            decision=decision,
        )

    i = state.incident_id
    if state.status in DECIDABLE:
        deadline = state.approval_deadline
        if deadline is not None and now >= deadline:
            return refuse(
                DecisionReason.EXPIRED,
                f"incident {i} expired: its approval deadline passed at {when(deadline)}; "
                "nothing changed",
                by=None, at=deadline,
            )
        return None
    if state.status is S.EXPIRED:
        return refuse(
            DecisionReason.EXPIRED,
            f"incident {i} expired at {when(state.updated_at)} without a decision; nothing changed",
            by=state.status_by, at=state.updated_at,
        )
    if state.decision is not None and state.status in _AFTER_DECISION:
        d = state.decision
        return refuse(
            DecisionReason.ALREADY_DECIDED, _decided_line(i, d, state.status),
            by=d.actor_name or d.actor_id, at=d.decided_at, decision=d,
        )
    by = state.status_by or "zonemedic"
    return refuse(
        DecisionReason.NOT_CURRENT,
        f"incident {i} is no longer current: {state.status} by {by} at {when(state.updated_at)}; "
        "nothing changed",
        by=state.status_by, at=state.updated_at, decision=state.decision,
    )


def recorded(request: DecisionRequest, result: TransitionResult, *, now: datetime) -> DecisionResult:
    """The result of a decision this caller recorded."""
    until = request.snoozed_until(now)
    who = request.actor.label
    suffix = f" until {when(until)}" if until is not None else ""
    return DecisionResult(
        incident_id=request.incident_id, outcome=request.outcome, recorded=True,
        reason=DecisionReason.RECORDED, status=result.status, decided_by=who, decided_at=now,
        message=f"incident {request.incident_id} {_PAST[request.outcome]} by {who}{suffix}",
        decision=result.decision, snoozed_until=until,
    )


def not_found(request: DecisionRequest) -> DecisionResult:
    return DecisionResult(
        incident_id=request.incident_id, outcome=request.outcome, recorded=False,
        reason=DecisionReason.NOT_FOUND, status=None, decided_by=None, decided_at=None,
        message=f"no incident {request.incident_id}; nothing changed",
    )


def not_authorized(request: DecisionRequest, state: IncidentState, reason: str) -> DecisionResult:
    """The result of a decision refused because the decider is not an approver in force."""
    return DecisionResult(
        incident_id=request.incident_id, outcome=request.outcome, recorded=False,
        reason=DecisionReason.NOT_AUTHORIZED, status=state.status, decided_by=None,
        decided_at=None,
        message=f"incident {request.incident_id} not {_PAST[request.outcome]}: {reason}; "
        "nothing changed",
    )


def kept_moving(request: DecisionRequest, last: TransitionResult | None) -> DecisionResult:
    """The incident changed under every attempt (a pathological race): nothing was recorded."""
    status = last.status if last is not None else None
    return DecisionResult(
        incident_id=request.incident_id, outcome=request.outcome, recorded=False,
        reason=DecisionReason.NOT_CURRENT, status=status,
        decided_by=last.status_by if last is not None else None, decided_at=None,
        message=f"incident {request.incident_id} kept changing while deciding (now {status}); "
        "nothing changed, try again",
        decision=last.decision if last is not None else None,
    )


# --------------------------------------------------------------------------------------------
# the store call (thin)


def decide(
    store: DecisionStore, request: DecisionRequest, *, now: datetime, authority: Authorizer
) -> DecisionResult:
    """Record `request` if its decider is an approver in force (`authority`) and the incident is
    decidable (one winner among concurrent deciders).

    Raises `DecisionError` for a malformed request (nothing read) and the store's errors
    (`StoreUnavailableError` when the database is away); every other outcome is a result. A
    refused decider leaves a `note` on the incident's timeline.
    """
    validate(request)
    last: TransitionResult | None = None
    for attempt in range(ATTEMPTS):
        try:
            detail = store.get_incident(request.incident_id)
        except IncidentNotFoundError:
            return not_found(request)
        state = IncidentState.of(detail)
        if attempt == 0:
            verdict = authority.authorize(detail, request.actor)
            if not verdict.allowed:
                try:
                    store.add_event(
                        request.incident_id, EventKind.NOTE, now=now, actor=request.actor.id,
                        detail=refusal_note(request.actor, outcome=request.outcome.value,
                                            reason=verdict.reason),
                    )
                except IncidentNotFoundError:  # purged meanwhile: nothing left to audit on
                    return not_found(request)
                return not_authorized(request, state, verdict.reason)
        refusal = judge(state, request, now=now)
        if refusal is not None:
            return refusal
        try:
            last = store.record_decision(
                request.incident_id, request.outcome, actor=request.actor, now=now,
                comment=request.reason, expected=state.status,
                snoozed_until=request.snoozed_until(now),
            )
        except IncidentNotFoundError:  # purged between the read and the write
            return not_found(request)
        if last.applied:
            return recorded(request, last, now=now)
        # lost: someone else moved it first; read again and judge what it is now
    return kept_moving(request, last)
