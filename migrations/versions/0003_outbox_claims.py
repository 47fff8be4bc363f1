"""Outbox claims: outbox_messages.claim_token and claimed_until (both nullable).

Revision ID: 0003_outbox_claims
Revises: 0002_approval_deadline
Create Date: 2026-11-30

A deliverer claims a due message by writing a fresh random token and the claim's expiry in one
conditional UPDATE; marking it delivered or failed applies only with that token while the message
is pending. Existing messages get NULL (claimable). Batch mode lets the ALTER work on SQLite.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0003_outbox_claims'
down_revision: str | None = '0002_approval_deadline'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('outbox_messages', schema=None) as batch_op:
        batch_op.add_column(sa.Column('claim_token', sa.String(length=36), nullable=True))
        batch_op.add_column(sa.Column('claimed_until', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('outbox_messages', schema=None) as batch_op:
        batch_op.drop_column('claimed_until')
        batch_op.drop_column('claim_token')
