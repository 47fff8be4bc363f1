"""Retention: deleting closed incidents older than the configured age, keeping the decision audit.

Who calls it: `IncidentStore.purge` (the agent's sweep, with `before = now - database.retention`,
default 180 days) and `zonemedic db purge`. What it deletes, in one transaction per batch: closed
incidents (`closed_at < before`; open incidents are never purged however old) and their timeline
events, remediation actions and outbox messages. What it keeps: the `decisions` rows (who approved or
rejected what, when, for which job): they carry the job's name and have no foreign key, so the
audit trail outlives the incident.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Connection, delete, select

from agent.model.incident import PurgeResult
from agent.store.schema import ActionRow, IncidentEventRow, IncidentRow, OutboxRow


def cutoff(now: datetime, retention: timedelta) -> datetime:
    """The `before` of a purge: incidents closed before this instant are deleted."""
    return now - retention


def purge_batch(conn: Connection, *, before: datetime, batch: int) -> PurgeResult:
    """Delete up to `batch` incidents closed before `before`, with their dependent rows."""
    incident_ids = list(
        conn.execute(
            select(IncidentRow.id)
            .where(IncidentRow.closed_at.is_not(None), IncidentRow.closed_at < before)
            .order_by(IncidentRow.closed_at)
            .limit(batch)
        ).scalars()
    )
    if not incident_ids:
        return PurgeResult(0, 0, 0, 0)
    events = conn.execute(
        delete(IncidentEventRow).where(IncidentEventRow.incident_id.in_(incident_ids))
    ).rowcount
    actions = conn.execute(delete(ActionRow).where(ActionRow.incident_id.in_(incident_ids))).rowcount
    messages = conn.execute(
        delete(OutboxRow).where(OutboxRow.incident_id.in_(incident_ids))
    ).rowcount
    incidents = conn.execute(delete(IncidentRow).where(IncidentRow.id.in_(incident_ids))).rowcount
    return PurgeResult(incidents, events, actions, messages)


def add(a: PurgeResult, b: PurgeResult) -> PurgeResult:
    return PurgeResult(
        a.incidents + b.incidents, a.events + b.events, a.actions + b.actions,
        a.messages + b.messages,
    )
