"""initial schema: tenants, api_keys, datasets, classifiers, training_jobs, job_events

Revision ID: 0001
Revises:
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _ts(name: str, *, nullable: bool = False) -> sa.Column[object]:
    # service.core.models.UTCDateTime renders as this type; it adds only Python-side conversion.
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _id(name: str = "id", **kwargs: object) -> sa.Column[object]:
    return sa.Column(name, sa.String(36), **kwargs)  # type: ignore[arg-type]


def _tenant_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["tenant_id"], ["tenants.id"], name=f"fk_{table}_tenant_id_tenants", ondelete="CASCADE"
    )


def upgrade() -> None:
    op.create_table(
        "tenants",
        _id(nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        _ts("created_at"),
        sa.PrimaryKeyConstraint("id", name="pk_tenants"),
        sa.UniqueConstraint("name", name="uq_tenants_name"),
    )
    op.create_table(
        "api_keys",
        _id(nullable=False),
        _id("tenant_id", nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False),
        sa.Column("prefix", sa.String(16), nullable=False),
        _ts("created_at"),
        _ts("revoked_at", nullable=True),
        _tenant_fk("api_keys"),
        sa.PrimaryKeyConstraint("id", name="pk_api_keys"),
        sa.UniqueConstraint("key_hash", name="uq_api_keys_key_hash"),
    )
    op.create_index("ix_api_keys_tenant_id", "api_keys", ["tenant_id"])
    op.create_table(
        "datasets",
        _id(nullable=False),
        _id("tenant_id", nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("origin", sa.String(16), nullable=False),
        sa.Column("path", sa.String(512), nullable=False),
        sa.Column("rows", sa.Integer(), nullable=False),
        sa.Column("classes", sa.Integer(), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        _ts("created_at"),
        _tenant_fk("datasets"),
        sa.PrimaryKeyConstraint("id", name="pk_datasets"),
    )
    op.create_index("ix_datasets_tenant_id", "datasets", ["tenant_id"])
    op.create_table(
        "classifiers",
        _id(nullable=False),
        _id("tenant_id", nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("language", sa.String(16), nullable=False),
        _id("dataset_id", nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("status_description", sa.Text(), nullable=False),
        sa.Column("model_dir", sa.String(512), nullable=True),
        sa.Column("metrics", sa.JSON(), nullable=True),
        _ts("created_at"),
        _ts("updated_at"),
        sa.ForeignKeyConstraint(
            ["dataset_id"], ["datasets.id"], name="fk_classifiers_dataset_id_datasets", ondelete="SET NULL"
        ),
        _tenant_fk("classifiers"),
        sa.PrimaryKeyConstraint("id", name="pk_classifiers"),
    )
    op.create_index("ix_classifiers_dataset_id", "classifiers", ["dataset_id"])
    op.create_index("ix_classifiers_tenant_id", "classifiers", ["tenant_id"])
    op.create_table(
        "training_jobs",
        _id(nullable=False),
        _id("classifier_id", nullable=False),
        _id("tenant_id", nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("lease_owner", sa.String(256), nullable=True),
        _ts("lease_expires_at", nullable=True),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("progress", sa.JSON(), nullable=True),
        sa.Column("checkpoint_dir", sa.String(512), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        _ts("created_at"),
        _ts("started_at", nullable=True),
        _ts("finished_at", nullable=True),
        _ts("updated_at"),
        sa.ForeignKeyConstraint(
            ["classifier_id"],
            ["classifiers.id"],
            name="fk_training_jobs_classifier_id_classifiers",
            ondelete="CASCADE",
        ),
        _tenant_fk("training_jobs"),
        sa.PrimaryKeyConstraint("id", name="pk_training_jobs"),
    )
    op.create_index("ix_training_jobs_classifier_id", "training_jobs", ["classifier_id"])
    op.create_index("ix_training_jobs_state", "training_jobs", ["state"])
    op.create_index("ix_training_jobs_tenant_id", "training_jobs", ["tenant_id"])
    op.create_table(
        "job_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        _id("job_id", nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("worker_id", sa.String(256), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        _ts("at"),
        sa.ForeignKeyConstraint(
            ["job_id"], ["training_jobs.id"], name="fk_job_events_job_id_training_jobs", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_job_events"),
    )
    op.create_index("ix_job_events_job_id", "job_events", ["job_id"])


def downgrade() -> None:
    for table in ("job_events", "training_jobs", "classifiers", "datasets", "api_keys", "tenants"):
        op.drop_table(table)
