"""an index on job_events.at

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-07

The dashboard reads the timeline by time at each 2-second poll (the last hour's jobs queued and
training, service/ops/state_history.py; the last day's failures and resumes): without an index
each poll scanned every event ever recorded.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_job_events_at", "job_events", ["at"])


def downgrade() -> None:
    op.drop_index("ix_job_events_at", table_name="job_events")
