"""An incident's timeline and remediation steps: appending events and recording actions.

Who calls it: `IncidentStore.add_event` (`touch` then `insert_event`: notes, evidence, remediation
steps) and `IncidentStore.record_action` (the remediation executor), and the store's other modules,
which append the event of every change they make (`insert_event`) in the same transaction as the
change. Each function runs inside the caller's
transaction (`conn`); the facade owns transactions and retries.

What it does not do: change an incident's status (that is `agent.store.transitions`) or read a clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, func, insert, update

from agent.model.lifecycle import EventKind, RemediationActionKind
from agent.store.errors import IncidentNotFoundError
from agent.store.schema import ActionRow, IncidentEventRow, IncidentRow


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
