"""per-tenant quota overrides: tenant_quotas (a NULL column means the installation default)

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-24

A table of its own (not columns on ``tenants``): an override row exists only for a tenant
whose quotas an administrator changed.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tenant_quotas",
        sa.Column("tenant_id", sa.String(36), nullable=False),
        sa.Column("classifiers", sa.Integer(), nullable=True),
        sa.Column("training_jobs", sa.Integer(), nullable=True),
        sa.Column("dataset_bytes", sa.BigInteger(), nullable=True),
        sa.Column("dataset_rows", sa.Integer(), nullable=True),
        sa.Column("classify_rps", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name="fk_tenant_quotas_tenant_id_tenants", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("tenant_id", name="pk_tenant_quotas"),
    )


def downgrade() -> None:
    op.drop_table("tenant_quotas")
