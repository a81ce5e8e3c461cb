"""a dataset's report: class counts, duplicates, conflicts and confusable classes

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03

Computed at upload (service/catalogue/dataset_report.py) and kept in the dataset's row, so that
deleting the dataset or its tenant removes it with the row, and an upload that does not commit
leaves none. NULL for the datasets stored before: their report is computed when first asked for.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.add_column(sa.Column("report", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("report")
