"""A training worker gives its slot to a tenant holding fewer (workers.fair_share), driven by
run_training_job directly against the real databases and the real trainer.

Whether a job yields depends on every tenant's jobs in the database, so each test runs on a
database of its own (``database_url`` is overridden here).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from benchmarks.chaos import NGRAM_LANGUAGE
from service.core.models import ClassifierStatus, JobEvent, JobState
from service.core.settings import Settings
from service.training.leases import claim_job
from tests.conftest import migrated_database
from workers.training_run import JobInterrupted, run_training_job

pytestmark = pytest.mark.integration


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated database of this test's own (no other test's queued jobs in it)."""
    with migrated_database(request.param, tmp_path) as url:
        yield url


@pytest.mark.slow
def test_a_job_yields_its_slot_to_a_tenant_holding_none_and_resumes_later(
    queue_job: Callable[..., Any],
    intents_csv: Path,
    settings_factory: Callable[..., Settings],
    session: Session,
) -> None:
    settings = settings_factory(redis_url=None, learners=1, heartbeat_seconds=0.1)
    elsewhere = queue_job(intents_csv, settings)  # tenant A's other job, on another worker
    mine = queue_job(
        intents_csv, settings, elsewhere.tenant_id, NGRAM_LANGUAGE
    )  # yields at once: a checkpoint
    now = datetime.now(UTC)
    assert claim_job(session, elsewhere.job_id, "host-x:1", now=now, lease=timedelta(minutes=10))
    waiting = queue_job(intents_csv, settings)  # tenant B's one job: A holds both slots once mine starts

    with pytest.raises(JobInterrupted, match="a tenant holding fewer slots"):
        run_training_job(mine.job_id, settings, "host-a:1")

    job, _ = mine.reload(session)
    assert (job.state, job.lease_owner) == (JobState.QUEUED, None)
    yielded_at = job.checkpoint_step  # the checkpoint written as it yielded
    assert job.checkpoint_path is not None and yielded_at
    kinds = [(e.kind, e.detail) for e in session.scalars(select(JobEvent).where(JobEvent.job_id == job.id))]
    assert kinds[-1] == ("queued", "released by host-a:1 to a tenant holding fewer slots"), kinds
    # B's job takes the freed slot; one slot each for A and B now, so A's job runs to the end
    assert claim_job(session, waiting.job_id, "host-b:1", now=datetime.now(UTC), lease=timedelta(minutes=10))
    run_training_job(mine.job_id, settings, "host-a:1")
    job, classifier = mine.reload(session)
    assert job.state == JobState.SUCCEEDED and classifier.status == ClassifierStatus.AVAILABLE
    resumed = session.scalars(select(JobEvent).where(JobEvent.job_id == job.id, JobEvent.kind == "resumed"))
    assert [e.step for e in resumed] == [yielded_at]  # it went on from where it stopped
