"""How many remediations a cluster started recently: the count behind the executor's hourly cap.

Who calls it: the leader's remediation executor (`agent.runtime.remediation_queue`), before it starts a new
remediation. A remediation starts when its incident enters `remediating`, which the store records
as a `remediation_started` timeline event in the same transaction; this module counts those events
of one cluster's incidents since a time. Events survive a leader change, so the cap holds across
replicas and restarts. One read, no retry: a database error is a `StoreUnavailableError` or
`StoreError`, and the executor simply tries again at its next tick.

What it does not do: write anything, or decide whether the cap is reached (the executor's guard).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select

from agent.model.lifecycle import EventKind
from agent.store.errors import translated
from agent.store.repository import IncidentStore
from agent.store.schema import IncidentEventRow, IncidentRow


def remediations_started(store: IncidentStore, *, cluster: str, since: datetime) -> int:
    """Remediations started in `cluster` at or after `since`."""
    statement = (
        select(func.count())
        .select_from(IncidentEventRow)
        .join(IncidentRow, IncidentRow.id == IncidentEventRow.incident_id)
        .where(
            IncidentEventRow.kind == EventKind.REMEDIATION_STARTED.value,
            IncidentEventRow.at >= since,
            IncidentRow.cluster == cluster,
        )
    )
    with translated(store.target, "count remediations started"), store.engine.connect() as conn:
        return int(conn.execute(statement).scalar_one())
