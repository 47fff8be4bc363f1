"""One open incident per job: the partial unique index uq_incidents_open_job.

Revision ID: 0004_one_open_incident_per_job
Revises: 0003_outbox_claims
Create Date: 2026-12-02

The dedupe guarantee becomes one open incident per (cluster, job kind, namespace, name), whatever
its verdicts, enforced by a unique index on the open incidents' job (closed_at IS NULL), so two
replicas or a restart cannot open a second one. A database written before it may hold several open
incidents of one job (one per verdict class): before the index is created each such job keeps one,
the one a remediation is under way on (approved, remediating, verifying) if any, else the newest;
the others are closed as `superseded` with a timeline event naming the incident kept. Written with
plain SQLAlchemy (no application types), as revision 0001: timestamps are timestamptz on PostgreSQL
and naive-UTC text on SQLite, JSON documents JSONB on PostgreSQL and TEXT on SQLite.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = '0004_one_open_incident_per_job'
down_revision: str | None = '0003_outbox_claims'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_UNDER_WAY = ("approved", "remediating", "verifying")  # a remediation holds the job


def _keepers(rows: Sequence[Any]) -> dict[int, int]:
    """Incident id to close -> the id of the one its job keeps."""
    by_job: dict[tuple[str, str, str, str], list[Any]] = {}
    for row in rows:
        by_job.setdefault((row.cluster, row.job_kind, row.job_namespace, row.job_name), []).append(row)
    closing: dict[int, int] = {}
    for group in by_job.values():
        if len(group) < 2:
            continue
        under_way = [r for r in group if r.status in _UNDER_WAY]
        kept = max(under_way or group, key=lambda r: r.id)
        for row in group:
            if row.id != kept.id:
                closing[row.id] = kept.id
    return closing


def upgrade() -> None:
    bind = op.get_bind()
    sqlite = bind.dialect.name == "sqlite"
    rows = bind.execute(sa.text(
        "SELECT id, cluster, job_kind, job_namespace, job_name, status FROM incidents "
        "WHERE closed_at IS NULL")).fetchall()
    now = datetime.now(UTC)
    stamp = sa.bindparam("now", now.replace(tzinfo=None) if sqlite else now,
                         type_=sa.DateTime(timezone=True))
    close = sa.text(
        "UPDATE incidents SET status = 'superseded', status_by = 'zonemedic', "
        "closed_at = :now, updated_at = :now WHERE id = :id AND closed_at IS NULL"
    ).bindparams(stamp)
    detail_value = ":detail" if sqlite else "CAST(:detail AS JSONB)"
    event = sa.text(
        "INSERT INTO incident_events (incident_id, at, kind, actor, detail) "
        f"VALUES (:id, :now, 'superseded', 'zonemedic', {detail_value})"
    ).bindparams(stamp)
    for incident_id, kept in sorted(_keepers(rows).items()):
        bind.execute(close, {"id": incident_id})
        detail = {"reason": f"one open incident per job: incident {kept} is kept open",
                  "from": "migration 0004"}
        bind.execute(event, {"id": incident_id, "detail": json.dumps(detail)})
    with op.batch_alter_table('incidents', schema=None) as batch_op:
        batch_op.create_index(
            'uq_incidents_open_job', ['cluster', 'job_kind', 'job_namespace', 'job_name'],
            unique=True, sqlite_where=sa.text('closed_at IS NULL'),
            postgresql_where=sa.text('closed_at IS NULL'))


def downgrade() -> None:
    with op.batch_alter_table('incidents', schema=None) as batch_op:
        batch_op.drop_index('uq_incidents_open_job', sqlite_where=sa.text('closed_at IS NULL'),
                            postgresql_where=sa.text('closed_at IS NULL'))
