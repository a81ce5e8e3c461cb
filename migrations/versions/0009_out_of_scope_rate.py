"""a classifier's out-of-scope rate, set by its tenant

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-07

The share of in-scope texts a single-label classifier may reject as out of scope: a model
carries its own, fixed at training (trainer/in_scope.py, 2 % by default), and a tenant may
change it per classifier without retraining (``PATCH /v1/classifiers/{id}``). NULL, for every
classifier stored before as for one never changed, means the serving model's own rate.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("classifiers") as batch:
        batch.add_column(sa.Column("out_of_scope_rate", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("classifiers") as batch:
        batch.drop_column("out_of_scope_rate")
