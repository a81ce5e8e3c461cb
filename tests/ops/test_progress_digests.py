"""The recent jobs' progress as the overview's throughput chart and the scrape read it: each job's
digest is worked out once per progress write, and the chart sums the jobs' minutes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import delete, update
from sqlalchemy.orm import Session

from service.core.models import JobEvent, TrainingJob, utcnow
from service.ops import observe, views
from tests.ops.conftest import FinishedJob

pytestmark = pytest.mark.dialect_neutral


def test_a_jobs_digest_is_read_once_until_the_job_is_written_again(
    session: Session, finished_job: FinishedJob, monkeypatch: pytest.MonkeyPatch
) -> None:
    digests = observe.ProgressDigests()
    made: list[object] = []
    real = observe.JobDigest.of
    monkeypatch.setattr(observe.JobDigest, "of", lambda progress: made.append(progress) or real(progress))

    def read() -> dict[str, observe.JobDigest]:
        session.expire_all()
        return digests.of(session, observe.recent_jobs(session, now=utcnow()))

    first = read()[finished_job.job_id]
    reads_for_every_job = len(made)
    again = read()[finished_job.job_id]

    assert (first.samples_per_second, first.pushed, first.applied) == (2300.0, 800.0, 800.0)
    assert first.staleness == (800.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    assert 1 <= len(first.minutes) <= 2  # its three points, two seconds apart
    assert reads_for_every_job >= 1 and len(made) == reads_for_every_job and again is first
    session.execute(
        update(TrainingJob)
        .where(TrainingJob.id == finished_job.job_id)
        .values(updated_at=utcnow() + timedelta(seconds=1))
    )
    session.commit()
    assert read()[finished_job.job_id] == first and len(made) == reads_for_every_job + 1
    session.execute(delete(JobEvent).where(JobEvent.job_id == finished_job.job_id))
    session.execute(delete(TrainingJob).where(TrainingJob.id == finished_job.job_id))
    session.commit()
    assert finished_job.job_id not in read()


def test_the_throughput_sums_each_jobs_mean_per_minute_of_the_last_hour() -> None:
    now = datetime(2026, 11, 28, 12, 30, 15, tzinfo=UTC)
    minute = int(now.timestamp() // 60)

    def digest(minutes: dict[int, float]) -> observe.JobDigest:
        return observe.JobDigest(0.0, 0.0, 0.0, (), minutes)

    chart = views._throughput(
        [
            digest({minute: 100.0, minute - 59: 5.0, minute - 60: 7.0}),
            digest({minute: 20.0, minute + 1: 9.0}),
        ],
        now=now,
    )

    assert len(chart) == 60
    assert chart[-1] == {"t": (minute + 1) * 60.0, "samples_per_second": 120.0}
    assert chart[0] == {"t": (minute - 58) * 60.0, "samples_per_second": 5.0}  # 60 minutes ago: out
    assert sum(point["samples_per_second"] for point in chart) == 125.0
