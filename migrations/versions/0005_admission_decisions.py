"""Admission decisions: the tables admission_decisions, admission_groups, admission_certificates.

Revision ID: 0005_admission_decisions
Revises: 0004_one_open_incident_per_job
Create Date: 2026-12-03

`admission_decisions` records what the admission webhook did with each job created (placed,
warned, passed unchanged and why), for `zonemedic admissions`, `GET /api/admissions` and the
digest; `admission_groups` keeps a generic group's first admission decision (its zone), one row
per (cluster, namespace, group), so every replica places the group's later objects alike; `admission_certificates` holds the
serving certificate the agent makes when none is mounted (one per cluster: every replica serves
the CA its webhook configuration names). Written
with plain SQLAlchemy (no application types), as revision 0001: timestamps are timestamptz on
PostgreSQL and naive-UTC text on SQLite.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0005_admission_decisions'
down_revision: str | None = '0004_one_open_incident_per_job'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('admission_decisions',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('cluster', sa.String(length=253), nullable=False),
    sa.Column('request_uid', sa.String(length=128), nullable=False),
    sa.Column('decided_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('job_kind', sa.String(length=63), nullable=False),
    sa.Column('job_namespace', sa.String(length=253), nullable=False),
    sa.Column('job_name', sa.String(length=253), nullable=False),
    sa.Column('object_kind', sa.String(length=63), nullable=False),
    sa.Column('object_name', sa.String(length=253), nullable=False),
    sa.Column('outcome', sa.String(length=16), nullable=False),
    sa.Column('zone', sa.String(length=63), nullable=True),
    sa.Column('mode', sa.String(length=16), nullable=False),
    sa.Column('kueue', sa.Boolean(), nullable=False),
    sa.Column('kept', sa.Boolean(), nullable=False),
    sa.Column('warning', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_admission_decisions'))
    )
    with op.batch_alter_table('admission_decisions', schema=None) as batch_op:
        batch_op.create_index('ix_admission_decisions_decided_at', ['decided_at'], unique=False)
        batch_op.create_index('ix_admission_decisions_job', ['job_namespace', 'job_name', 'decided_at'],
                              unique=False)
    op.create_table('admission_groups',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('cluster', sa.String(length=253), nullable=False),
    sa.Column('namespace', sa.String(length=253), nullable=False),
    sa.Column('group_name', sa.String(length=253), nullable=False),
    sa.Column('zone', sa.String(length=63), nullable=False),
    sa.Column('decided_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('object_kind', sa.String(length=63), nullable=False),
    sa.Column('object_name', sa.String(length=253), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_admission_groups'))
    )
    with op.batch_alter_table('admission_groups', schema=None) as batch_op:
        batch_op.create_index('uq_admission_groups_group', ['cluster', 'namespace', 'group_name'],
                              unique=True)


    op.create_table('admission_certificates',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('cluster', sa.String(length=253), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('not_after', sa.DateTime(timezone=True), nullable=False),
    sa.Column('ca_pem', sa.Text(), nullable=False),
    sa.Column('cert_pem', sa.Text(), nullable=False),
    sa.Column('key_pem', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_admission_certificates')),
    sa.UniqueConstraint('cluster', name=op.f('uq_admission_certificates_cluster'))
    )


def downgrade() -> None:
    op.drop_table('admission_certificates')
    with op.batch_alter_table('admission_groups', schema=None) as batch_op:
        batch_op.drop_index('uq_admission_groups_group')
    op.drop_table('admission_groups')
    with op.batch_alter_table('admission_decisions', schema=None) as batch_op:
        batch_op.drop_index('ix_admission_decisions_job')
        batch_op.drop_index('ix_admission_decisions_decided_at')
    op.drop_table('admission_decisions')
