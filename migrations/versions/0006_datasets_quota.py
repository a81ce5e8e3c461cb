"""the ``datasets`` quota: how many datasets a tenant may store at once

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-28

A tenant's 1,000,000 rows of data could be 500,000 datasets of two rows each: half a million
files, and a dataset listing that builds their whole reply at once. NULL, as for every quota
column, means the installation default (``TAAS_QUOTA_DATASETS``).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tenant_quotas") as batch:
        batch.add_column(sa.Column("datasets", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tenant_quotas") as batch:
        batch.drop_column("datasets")
