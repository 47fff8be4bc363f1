"""An incident's timeline and remediation steps: appending events and recording actions.

Who calls it: `IncidentStore.add_event` (`touch` then `insert_event`: notes, evidence, remediation
steps) and `IncidentStore.record_action` (the remediation executor), and the store's other modules,
which append the event of every change they make (`insert_event`) in the same transaction as the
change. Each function runs inside the caller's
transaction (`conn`); the facade owns transactions and retries.

Repeated observations (re-detections) are folded (`fold_event`): at most one row per incident, kind
and actor per `FOLD_WINDOW`, counting the repeats, so a flood cannot grow a timeline without bound.
An observation that must appear once whatever its repeats (a drop message) checks `has_event`
first, in the same transaction.
Decisions, status changes and remediation steps are never folded.

What it does not do: change an incident's status (that is `agent.store.transitions`) or read a clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, func, insert, select, update

from agent.model.lifecycle import EventKind, RemediationActionKind
from agent.store.errors import IncidentNotFoundError
from agent.store.schema import ActionRow, IncidentEventRow, IncidentRow

FOLD_WINDOW = timedelta(minutes=10)  # repeated observations within this are one timeline row


def insert_event(
    conn: Connection,
    incident_id: int,
    *,
    kind: EventKind,
    now: datetime,
    actor: str | None,
    detail: Mapping[str, Any],
) -> int:
    """Append one timeline event; returns its id."""
    event_id: int = conn.execute(
        insert(IncidentEventRow)
        .values(incident_id=incident_id, at=now, kind=kind.value, actor=actor, detail=dict(detail))
        .returning(IncidentEventRow.id)
    ).scalar_one()
    return event_id


def has_event(
    conn: Connection,
    incident_id: int,
    *,
    kind: EventKind,
    actor: str | None,
    detail: Mapping[str, Any],
) -> bool:
    """Whether the incident already has an event of `kind` and `actor` whose detail holds every
    item of `detail` (e.g. the same drop message for the same pod)."""
    rows = conn.execute(
        select(IncidentEventRow.detail).where(
            IncidentEventRow.incident_id == incident_id,
            IncidentEventRow.kind == kind.value,
            IncidentEventRow.actor == actor
            if actor is not None
            else IncidentEventRow.actor.is_(None),
        )
    )
    for (found,) in rows:
        if isinstance(found, dict) and all(found.get(k) == v for k, v in detail.items()):
            return True
    return False


def fold_event(
    conn: Connection,
    incident_id: int,
    *,
    kind: EventKind,
    now: datetime,
    actor: str | None,
    detail: Mapping[str, Any],
    window: timedelta = FOLD_WINDOW,
) -> int:
    """Append a repeated observation (a re-detection), or fold it into the incident's latest event
    of the same kind and actor when that one is less than `window` old: the folded event keeps its
    first `at`, shows the latest detail and counts `repeats` (with `last_at`). So a flood of the
    same observation (1,000 alerts in one webhook body) adds at most one row per incident, kind and
    actor per window. Returns the event's id. (Two writers folding at the same moment may each
    count one repeat: the incident's `detections` column is the exact count.)"""
    latest = conn.execute(
        select(IncidentEventRow.id, IncidentEventRow.at, IncidentEventRow.detail)
        .where(
            IncidentEventRow.incident_id == incident_id,
            IncidentEventRow.kind == kind.value,
            IncidentEventRow.actor == actor if actor is not None else IncidentEventRow.actor.is_(None),
        )
        .order_by(IncidentEventRow.id.desc())
        .limit(1)
    ).first()
    if not folds(latest.at if latest is not None else None, now=now, window=window):
        return insert_event(conn, incident_id, kind=kind, now=now, actor=actor, detail=detail)
    assert latest is not None
    conn.execute(
        update(IncidentEventRow)
        .where(IncidentEventRow.id == latest.id)
        .values(detail=folded_detail(latest.detail, detail, now=now))
    )
    event_id: int = latest.id
    return event_id


def folds(latest_at: datetime | None, *, now: datetime, window: timedelta = FOLD_WINDOW) -> bool:
    """Whether an observation at `now` folds into the latest event of its kind and actor (at
    `latest_at`, None when there is none): that one is less than `window` old."""
    return latest_at is not None and latest_at >= now - window


def folded_detail(before: Any, detail: Mapping[str, Any], *, now: datetime) -> dict[str, Any]:
    """The detail of an event a repeat at `now` folds into: the latest detail, `repeats` counted
    on from the event's `before` detail, and `last_at`."""
    previous = before if isinstance(before, dict) else {}
    repeats = previous.get("repeats", 1)
    return {
        **dict(detail),
        "repeats": (repeats if isinstance(repeats, int) else 1) + 1,
        "last_at": now.isoformat(),
    }


def touch(conn: Connection, incident_id: int, **values: Any) -> None:
    """Set `values` on the incident (at least `updated_at`); `IncidentNotFoundError` if it does
    not exist."""
    done = conn.execute(update(IncidentRow).where(IncidentRow.id == incident_id).values(**values))
    if done.rowcount != 1:
        raise IncidentNotFoundError(incident_id)


def record_action(
    conn: Connection,
    incident_id: int,
    kind: RemediationActionKind,
    *,
    now: datetime,
    actor: str | None,
    succeeded: bool | None,
    payload: Mapping[str, Any],
    message: str | None,
    utilization_before: float | None = None,
    utilization_after: float | None = None,
    event: EventKind | None = None,
) -> int:
    """Insert a remediation step with its timeline event (`event` when given, else `verified`
    for a successful verify, `remediation_step` otherwise). `utilization_after` is stored on the incident;
    `utilization_before` only where the incident has none yet (the detection's figure wins)."""
    values: dict[str, Any] = {"updated_at": now}
    if utilization_after is not None:
        values["utilization_after"] = utilization_after
    if utilization_before is not None:
        values["utilization_before"] = func.coalesce(IncidentRow.utilization_before,
                                                     utilization_before)
    touch(conn, incident_id, **values)
    action_id: int = conn.execute(
        insert(ActionRow)
        .values(incident_id=incident_id, kind=kind.value, at=now, actor=actor,
                succeeded=succeeded, payload=dict(payload), message=message)
        .returning(ActionRow.id)
    ).scalar_one()
    verified = kind is RemediationActionKind.VERIFY and succeeded
    event_kind = event or (EventKind.VERIFIED if verified else EventKind.REMEDIATION_STEP)
    detail: dict[str, Any] = {"action": kind.value, "action_id": action_id, "succeeded": succeeded}
    if message:
        detail["message"] = message
    insert_event(conn, incident_id, kind=event_kind, now=now, actor=actor, detail=detail)
    return action_id
