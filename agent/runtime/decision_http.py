"""The HTTP form of a decision: parse `POST /api/incidents/{id}/decision`, map results to codes.

The HTTP adapter of the approval domain (the decision itself is `agent.approval.decision`).

Who calls it: `agent.runtime.http` (the route) and nothing else. The body is one JSON object:
`{"outcome": "approve" | "reject" | "snooze", "by": "<who>", "reason": "<text>" | null,
"snooze_for": "24h" | <seconds> | null}`; `outcome` and `by` are required, `snooze_for` is for a
snooze only, and any other key is refused. A bad body is an `InputError` naming the field (400);
a body that is not UTF-8, not strict JSON or has a key twice is refused naming that
(`agent.parsing.strict_json`).

Status codes of a decision (`status_code`): 200 recorded; 403 `by` is not an approver in force
now (the body says why; audited on the incident's timeline); 404 no such incident; 409 already
decided, expired or no longer current (the body names who decided or closed it, and when).

What it does not do: authenticate (the route checks the bearer token first) or decide (the one
decision function, `agent.approval.decision.decide`, does, behind `IncidentDecisions`).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from agent.approval.decision import DecisionReason, DecisionRequest, DecisionResult, validate
from agent.errors import ConfigError, InputError
from agent.model.incident import Actor, parse_incident_id
from agent.model.lifecycle import DecisionOutcome, DecisionSource
from agent.parsing.strict_json import parse_json
from agent.settings import parse_duration

FIELDS = ("outcome", "by", "reason", "snooze_for")
MAX_BODY = 16_384

_STATUS: dict[DecisionReason, int] = {
    DecisionReason.RECORDED: 200,
    DecisionReason.NOT_FOUND: 404,
    DecisionReason.NOT_AUTHORIZED: 403,
    DecisionReason.ALREADY_DECIDED: 409,
    DecisionReason.EXPIRED: 409,
    DecisionReason.NOT_CURRENT: 409,
}


def incident_id(raw: str) -> int:
    return parse_incident_id(raw)


def _string(body: dict[str, Any], key: str, *, required: bool) -> str | None:
    value = body.get(key)
    if value is None:
        if required:
            raise InputError(f"{key}: required")
        return None
    if not isinstance(value, str):
        raise InputError(f"{key}: expected a string, got {json.dumps(value)}")
    return value


def _snooze_for(value: Any) -> timedelta | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InputError(f"snooze_for: expected a duration like 24h, got {json.dumps(value)}")
    try:
        return parse_duration(value, key="snooze_for")
    except ConfigError as exc:
        raise InputError(str(exc)) from None


def parse_decision(raw_id: str, body: bytes) -> DecisionRequest:
    """The decision a request asks for; `InputError` names the bad field."""
    ident = incident_id(raw_id)
    data = parse_json(body)  # UTF-8, strict JSON, no key twice: else 400 naming the problem
    if not isinstance(data, dict):
        raise InputError("body: expected a JSON object")
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise InputError(f"{unknown[0]}: unknown field (known: {', '.join(FIELDS)})")
    outcome_raw = _string(data, "outcome", required=True) or ""
    try:
        outcome = DecisionOutcome(outcome_raw)
    except ValueError:
        known = ", ".join(o.value for o in DecisionOutcome)
        raise InputError(f"outcome: expected one of {known}, got {outcome_raw!r}") from None
    by = (_string(data, "by", required=True) or "").strip()
    if not by:
        raise InputError("by: expected a name, got an empty one")
    request = DecisionRequest(
        incident_id=ident,
        outcome=outcome,
        actor=Actor(id=by, name=None, source=DecisionSource.API),
        reason=_string(data, "reason", required=False) or None,
        snooze_for=_snooze_for(data.get("snooze_for")),
    )
    validate(request)
    return request


def status_code(result: DecisionResult) -> int:
    return _STATUS[result.reason]
