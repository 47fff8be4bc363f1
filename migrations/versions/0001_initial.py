"""Initial schema: incidents, timeline events, decisions (audit), remediation actions, outbox.

Revision ID: 0001
Revises:
Create Date: 2026-11-29

Written with plain SQLAlchemy types (not the app's TypeDecorators) so this revision never changes
when application code does: timestamps are `timestamptz` on PostgreSQL and naive-UTC text on SQLite
(the `UTCDateTime` decorator's storage), JSON documents are JSONB on PostgreSQL and TEXT on SQLite.
The partial unique index `uq_incidents_open_fingerprint` is the dedupe guarantee: one open incident
per fingerprint.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

JSON_DOCUMENT = sa.Text().with_variant(postgresql.JSONB(), "postgresql")

revision: str = '0001'
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('decisions',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('incident_id', sa.Integer(), nullable=False),
    sa.Column('cluster', sa.String(length=253), nullable=False),
    sa.Column('job_namespace', sa.String(length=253), nullable=False),
    sa.Column('job_name', sa.String(length=253), nullable=False),
    sa.Column('verdict', sa.String(length=32), nullable=False),
    sa.Column('outcome', sa.String(length=16), nullable=False),
    sa.Column('actor_id', sa.String(length=253), nullable=False),
    sa.Column('actor_name', sa.String(length=253), nullable=True),
    sa.Column('source', sa.String(length=16), nullable=False),
    sa.Column('decided_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('comment', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_decisions'))
    )
    with op.batch_alter_table('decisions', schema=None) as batch_op:
        batch_op.create_index('ix_decisions_incident_id', ['incident_id'], unique=False)

    op.create_table('incidents',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('cluster', sa.String(length=253), nullable=False),
    sa.Column('job_kind', sa.String(length=63), nullable=False),
    sa.Column('job_namespace', sa.String(length=253), nullable=False),
    sa.Column('job_name', sa.String(length=253), nullable=False),
    sa.Column('job_uid', sa.String(length=128), nullable=True),
    sa.Column('verdict', sa.String(length=32), nullable=False),
    sa.Column('fingerprint', sa.String(length=64), nullable=False),
    sa.Column('status', sa.String(length=32), nullable=False),
    sa.Column('status_by', sa.String(length=253), nullable=True),
    sa.Column('status_token', sa.String(length=36), nullable=True),
    sa.Column('severity', sa.String(length=16), nullable=False),
    sa.Column('opened_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('closed_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('onset_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('decided_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('snoozed_until', sa.DateTime(timezone=True), nullable=True),
    sa.Column('target_zone', sa.String(length=63), nullable=True),
    sa.Column('diagnosis', JSON_DOCUMENT, nullable=False),
    sa.Column('utilization_before', sa.Float(), nullable=True),
    sa.Column('utilization_after', sa.Float(), nullable=True),
    sa.Column('estimated_cost', sa.Float(), nullable=True),
    sa.Column('gpus', sa.Integer(), nullable=True),
    sa.Column('detections', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_incidents'))
    )
    with op.batch_alter_table('incidents', schema=None) as batch_op:
        batch_op.create_index('ix_incidents_closed_at', ['closed_at'], unique=False)
        batch_op.create_index('ix_incidents_job', ['job_namespace', 'job_name', 'opened_at'], unique=False)
        batch_op.create_index('ix_incidents_opened_at', ['opened_at'], unique=False)
        batch_op.create_index('ix_incidents_status_opened_at', ['status', 'opened_at'], unique=False)
        batch_op.create_index('ix_incidents_verdict_opened_at', ['verdict', 'opened_at'], unique=False)
        batch_op.create_index('uq_incidents_open_fingerprint', ['fingerprint'], unique=True, sqlite_where=sa.text('closed_at IS NULL'), postgresql_where=sa.text('closed_at IS NULL'))

    op.create_table('incident_events',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('incident_id', sa.Integer(), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('actor', sa.String(length=253), nullable=True),
    sa.Column('detail', JSON_DOCUMENT, nullable=False),
    sa.ForeignKeyConstraint(['incident_id'], ['incidents.id'], name=op.f('fk_incident_events_incident_id_incidents'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_incident_events'))
    )
    with op.batch_alter_table('incident_events', schema=None) as batch_op:
        batch_op.create_index('ix_incident_events_incident_at', ['incident_id', 'at'], unique=False)

    op.create_table('outbox_messages',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('incident_id', sa.Integer(), nullable=True),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('channel', sa.String(length=253), nullable=True),
    sa.Column('payload', JSON_DOCUMENT, nullable=False),
    sa.Column('dedupe_key', sa.String(length=253), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('next_attempt_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('delivered_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('external_ref', sa.String(length=253), nullable=True),
    sa.ForeignKeyConstraint(['incident_id'], ['incidents.id'], name=op.f('fk_outbox_messages_incident_id_incidents'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_outbox_messages')),
    sa.UniqueConstraint('dedupe_key', name=op.f('uq_outbox_messages_dedupe_key'))
    )
    with op.batch_alter_table('outbox_messages', schema=None) as batch_op:
        batch_op.create_index('ix_outbox_messages_incident_id', ['incident_id'], unique=False)
        batch_op.create_index('ix_outbox_messages_status_next_attempt_at', ['status', 'next_attempt_at'], unique=False)

    op.create_table('remediation_actions',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('incident_id', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('actor', sa.String(length=253), nullable=True),
    sa.Column('succeeded', sa.Boolean(), nullable=True),
    sa.Column('payload', JSON_DOCUMENT, nullable=False),
    sa.Column('message', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['incident_id'], ['incidents.id'], name=op.f('fk_remediation_actions_incident_id_incidents'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_remediation_actions'))
    )
    with op.batch_alter_table('remediation_actions', schema=None) as batch_op:
        batch_op.create_index('ix_remediation_actions_incident_id', ['incident_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('remediation_actions', schema=None) as batch_op:
        batch_op.drop_index('ix_remediation_actions_incident_id')

    op.drop_table('remediation_actions')
    with op.batch_alter_table('outbox_messages', schema=None) as batch_op:
        batch_op.drop_index('ix_outbox_messages_status_next_attempt_at')
        batch_op.drop_index('ix_outbox_messages_incident_id')

    op.drop_table('outbox_messages')
    with op.batch_alter_table('incident_events', schema=None) as batch_op:
        batch_op.drop_index('ix_incident_events_incident_at')

    op.drop_table('incident_events')
    with op.batch_alter_table('incidents', schema=None) as batch_op:
        batch_op.drop_index('uq_incidents_open_fingerprint', sqlite_where=sa.text('closed_at IS NULL'), postgresql_where=sa.text('closed_at IS NULL'))
        batch_op.drop_index('ix_incidents_verdict_opened_at')
        batch_op.drop_index('ix_incidents_status_opened_at')
        batch_op.drop_index('ix_incidents_opened_at')
        batch_op.drop_index('ix_incidents_job')
        batch_op.drop_index('ix_incidents_closed_at')

    op.drop_table('incidents')
    with op.batch_alter_table('decisions', schema=None) as batch_op:
        batch_op.drop_index('ix_decisions_incident_id')

    op.drop_table('decisions')
