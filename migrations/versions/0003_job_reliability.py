"""job reliability: failed attempts, retry back-off, message bookkeeping, the fenced checkpoint
pointer on training_jobs; attempt and step on job_events

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24

Columns only, all nullable or with a server default, so existing rows upgrade in place.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("training_jobs") as batch:
        batch.add_column(sa.Column("failures", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("not_before", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("enqueued_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("checkpoint_path", sa.String(512), nullable=True))
        batch.add_column(sa.Column("checkpoint_step", sa.Integer(), nullable=True))
    with op.batch_alter_table("job_events") as batch:
        batch.add_column(sa.Column("attempt", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("step", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job_events") as batch:
        batch.drop_column("step")
        batch.drop_column("attempt")
    with op.batch_alter_table("training_jobs") as batch:
        for column in ("checkpoint_step", "checkpoint_path", "enqueued_at", "not_before", "failures"):
            batch.drop_column(column)
