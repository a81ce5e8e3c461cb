"""status webhooks: a signing secret per tenant, a callback URL per training job, the status
events (the webhook outbox) and their delivery attempts

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25

Existing tenants get a fresh random secret here, so the column can be NOT NULL.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _ts(name: str, *, nullable: bool = True) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("webhook_secret", sa.String(64), nullable=True))
    tenants = sa.table("tenants", sa.column("id", sa.String), sa.column("webhook_secret", sa.String))
    bind = op.get_bind()
    for (tenant_id,) in bind.execute(sa.select(tenants.c.id)).all():
        bind.execute(
            tenants.update()
            .where(tenants.c.id == tenant_id)
            .values(webhook_secret="whsec_" + secrets.token_urlsafe(32))
        )
    with op.batch_alter_table("tenants") as batch:
        batch.alter_column("webhook_secret", existing_type=sa.String(64), nullable=False)
    with op.batch_alter_table("training_jobs") as batch:
        batch.add_column(sa.Column("callback_url", sa.String(2048), nullable=True))
    op.create_table(
        "status_events",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("tenant_id", sa.String(36), nullable=False),
        sa.Column("classifier_id", sa.String(36), nullable=False),
        sa.Column("type", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("previous_status", sa.String(16), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("callback_url", sa.String(2048), nullable=True),
        sa.Column("delivery", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        _ts("next_attempt_at"),
        _ts("enqueued_at"),
        _ts("delivered_at"),
        _ts("created_at", nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name="fk_status_events_tenant_id_tenants", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["classifier_id"],
            ["classifiers.id"],
            name="fk_status_events_classifier_id_classifiers",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_status_events"),
    )
    for column in ("tenant_id", "classifier_id", "delivery"):
        op.create_index(f"ix_status_events_{column}", "status_events", [column])
    op.create_table(
        "webhook_attempts",
        sa.Column("event_id", sa.String(36), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        _ts("at", nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        _ts("next_attempt_at"),
        sa.ForeignKeyConstraint(
            ["event_id"],
            ["status_events.id"],
            name="fk_webhook_attempts_event_id_status_events",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("event_id", "attempt", name="pk_webhook_attempts"),
    )


def downgrade() -> None:
    op.drop_table("webhook_attempts")
    op.drop_table("status_events")
    with op.batch_alter_table("training_jobs") as batch:
        batch.drop_column("callback_url")
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("webhook_secret")
