"""evaluations: a version scored on a tenant's test file, run as a job

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-07

``POST /v1/classifiers/{id}/evaluate`` records one row; a worker claims it under a lease,
answers the test rows with the version's model and writes the report in its place
(service/training/evaluations.py). Deleting the version, the classifier or the tenant deletes
its evaluations.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PARENTS = {"tenant_id": "tenants", "classifier_id": "classifiers", "version_id": "classifier_versions"}


def _ts(name: str, *, nullable: bool = True) -> sa.Column[object]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "evaluations",
        sa.Column("id", sa.String(36), nullable=False),
        *(sa.Column(column, sa.String(36), nullable=False) for column in _PARENTS),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("rows", sa.Integer(), nullable=False),
        sa.Column("done", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        _ts("lease_expires_at"),
        _ts("enqueued_at"),
        sa.Column("test_rows", sa.JSON(), nullable=True),
        sa.Column("report", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        _ts("created_at", nullable=False),
        _ts("started_at"),
        _ts("finished_at"),
        *(
            sa.ForeignKeyConstraint(
                [column], [f"{table}.id"], name=f"fk_evaluations_{column}_{table}", ondelete="CASCADE"
            )
            for column, table in _PARENTS.items()
        ),
        sa.PrimaryKeyConstraint("id", name="pk_evaluations"),
    )
    for column in (*_PARENTS, "state"):
        op.create_index(f"ix_evaluations_{column}", "evaluations", [column])


def downgrade() -> None:
    op.drop_table("evaluations")
