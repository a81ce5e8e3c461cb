"""classifier versions: a versions table, the serving and newest version, the promote mode and
the mode (single- or multi-label) of each classifier, the version each training job trains and
each status event is about (whose classifier is no longer a foreign key: a deletion's event
outlives its classifier), and the ``versions`` quota

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23

Every existing classifier becomes version 1 of itself (its dataset, status, model and metrics),
serving when it is Available; its jobs train version 1. Model and checkpoint paths already
recorded stay where they are (only new trainings use the per-version folders).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "classifier_versions",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("classifier_id", sa.String(36), nullable=False),
        sa.Column("tenant_id", sa.String(36), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("dataset_id", sa.String(36), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("status_description", sa.Text(), nullable=False),
        sa.Column("model_dir", sa.String(512), nullable=True),
        sa.Column("metrics", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["classifier_id"],
            ["classifiers.id"],
            name="fk_classifier_versions_classifier_id_classifiers",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name="fk_classifier_versions_tenant_id_tenants", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["dataset_id"],
            ["datasets.id"],
            name="fk_classifier_versions_dataset_id_datasets",
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_classifier_versions"),
        sa.UniqueConstraint("classifier_id", "number", name="uq_classifier_versions_classifier_id"),
    )
    for column in ("classifier_id", "tenant_id", "dataset_id"):
        op.create_index(f"ix_classifier_versions_{column}", "classifier_versions", [column])
    with op.batch_alter_table("classifiers") as batch:
        batch.add_column(sa.Column("serving_version", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("latest_version", sa.Integer(), nullable=False, server_default="1"))
        batch.add_column(sa.Column("promote", sa.String(8), nullable=False, server_default="auto"))
        batch.add_column(sa.Column("mode", sa.String(16), nullable=False, server_default="single_label"))
    with op.batch_alter_table("training_jobs") as batch:
        batch.add_column(sa.Column("version", sa.Integer(), nullable=False, server_default="1"))
    with op.batch_alter_table("status_events") as batch:
        batch.add_column(sa.Column("version", sa.Integer(), nullable=True))
        batch.drop_constraint("fk_status_events_classifier_id_classifiers", type_="foreignkey")
    with op.batch_alter_table("tenant_quotas") as batch:
        batch.add_column(sa.Column("versions", sa.Integer(), nullable=True))
    _existing_classifiers_become_version_1()
    # The defaults were for the rows above; the application always sets these columns.
    with op.batch_alter_table("classifiers") as batch:
        batch.alter_column("latest_version", existing_type=sa.Integer(), server_default=None)
        batch.alter_column("promote", existing_type=sa.String(8), server_default=None)
        batch.alter_column("mode", existing_type=sa.String(16), server_default=None)
    with op.batch_alter_table("training_jobs") as batch:
        batch.alter_column("version", existing_type=sa.Integer(), server_default=None)


def _existing_classifiers_become_version_1() -> None:
    classifiers = sa.table(
        "classifiers",
        *(
            sa.column(name)
            for name in ("id", "tenant_id", "dataset_id", "status", "status_description", "model_dir")
        ),
        sa.column("metrics", sa.JSON()),
        sa.column("created_at", sa.DateTime(timezone=True)),
        sa.column("updated_at", sa.DateTime(timezone=True)),
        sa.column("serving_version", sa.Integer()),
    )
    versions = sa.table(
        "classifier_versions",
        *(
            sa.column(name)
            for name in ("id", "classifier_id", "tenant_id", "dataset_id", "status", "status_description")
        ),
        sa.column("number", sa.Integer()),
        sa.column("model_dir", sa.String()),
        sa.column("metrics", sa.JSON()),
        sa.column("created_at", sa.DateTime(timezone=True)),
        sa.column("updated_at", sa.DateTime(timezone=True)),
    )
    bind = op.get_bind()
    for row in bind.execute(sa.select(classifiers)).all():
        bind.execute(
            versions.insert().values(
                id=str(uuid.uuid4()),
                classifier_id=row.id,
                tenant_id=row.tenant_id,
                number=1,
                dataset_id=row.dataset_id,
                status=row.status,
                status_description=row.status_description,
                model_dir=row.model_dir,
                metrics=row.metrics,
                created_at=row.created_at,
                updated_at=row.updated_at,
            )
        )
    bind.execute(classifiers.update().where(classifiers.c.status == "Available").values(serving_version=1))


def downgrade() -> None:
    with op.batch_alter_table("tenant_quotas") as batch:
        batch.drop_column("versions")
    # The events of deleted classifiers (deletions still to deliver) cannot keep the foreign key.
    op.execute("DELETE FROM status_events WHERE classifier_id NOT IN (SELECT id FROM classifiers)")
    with op.batch_alter_table("status_events") as batch:
        batch.drop_column("version")
        batch.create_foreign_key(
            "fk_status_events_classifier_id_classifiers",
            "classifiers",
            ["classifier_id"],
            ["id"],
            ondelete="CASCADE",
        )
    with op.batch_alter_table("training_jobs") as batch:
        batch.drop_column("version")
    with op.batch_alter_table("classifiers") as batch:
        batch.drop_column("mode")
        batch.drop_column("promote")
        batch.drop_column("latest_version")
        batch.drop_column("serving_version")
    op.drop_table("classifier_versions")
