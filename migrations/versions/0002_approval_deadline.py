"""Approval deadline: incidents.approval_deadline (UTC, nullable).

Revision ID: 0002_approval_deadline
Revises: 0001
Create Date: 2026-11-30

The store's `request_approval` sets it when an incident starts awaiting approval, and `expire_due`
moves an incident whose deadline has passed to `expired`. Existing incidents get NULL (no deadline:
they never expire by themselves). Plain SQLAlchemy types, like 0001: `timestamptz` on PostgreSQL,
naive-UTC text on SQLite; batch mode lets the ALTER work on SQLite.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0002_approval_deadline'
down_revision: str | None = '0001'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('incidents', schema=None) as batch_op:
        batch_op.add_column(sa.Column('approval_deadline', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('incidents', schema=None) as batch_op:
        batch_op.drop_column('approval_deadline')
