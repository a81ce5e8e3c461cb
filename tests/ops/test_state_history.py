"""Jobs queued and training per minute of the last hour, read back from the timelines."""

from __future__ import annotations

from datetime import datetime, timedelta

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.core.models import TrainingJob, utcnow
from service.ops import observe, state_history
from service.training import leases
from tests.conftest import TenantHandle
from tests.ops.conftest import INTENTS_NLC, WORKER
from tests.service.helpers import nlc_files

LEASE = timedelta(minutes=30)


def test_each_minute_counts_the_jobs_queued_and_training_at_its_end(
    client: TestClient, tenant: TenantHandle, session: Session
) -> None:
    # given: three jobs queued now (t0); later one trains and succeeds, another trains and is
    # given back to the queue (the platform's own lease functions, at chosen times)
    created = []
    for n in range(3):
        reply = client.post(
            "/v1/classifiers",
            files=nlc_files(INTENTS_NLC, {"name": f"history-{n}", "language": "en"}),
            headers=tenant.headers,
        )
        assert reply.status_code == 200, reply.text
        created.append(reply.json()["classifier_id"])
    t0 = utcnow()
    first, second, _ = (
        session.scalar(select(TrainingJob.id).where(TrainingJob.classifier_id == classifier_id))
        for classifier_id in created
    )
    assert first is not None and second is not None

    def at(minutes: float) -> datetime:
        return t0 + timedelta(minutes=minutes)

    lease = leases.claim_job(session, first, WORKER, now=at(10), lease=LEASE)
    assert lease is not None
    assert leases.finish_job(session, lease, model_dir="model", metrics={}, now=at(20))
    lease = leases.claim_job(session, second, WORKER, now=at(30), lease=LEASE)
    assert lease is not None
    assert leases.release_job(session, lease, now=at(40))
    # when
    points = state_history.active_history(session, now=at(50))
    # then: a point a minute, the last one now's counts
    assert len(points) == 60 and points[-1]["t"] >= at(50).timestamp()
    assert [b["t"] - a["t"] for a, b in zip(points, points[1:], strict=False)] == [60.0] * 59
    now = observe.job_counts(session)
    assert (points[-1]["queued"], points[-1]["training"]) == (now["queued"], now["training"])

    def counts(minutes: float) -> tuple[float, float]:
        point = next(p for p in points if p["t"] >= at(minutes).timestamp())
        return point["queued"], point["training"]

    queued, training = counts(5)  # all three queued
    assert (queued, training) == (now["queued"] + 1, now["training"])  # the first has succeeded since
    assert counts(15) == (queued - 1, training + 1)  # the first trains
    assert counts(25) == (queued - 1, training)  # and is done
    assert counts(35) == (queued - 2, training + 1)  # the second trains
    assert counts(45) == (queued - 1, training)  # and is back in the queue


def test_the_overview_keeps_the_finished_minutes_until_the_minute_turns(
    client: TestClient, tenant: TenantHandle, session: Session
) -> None:
    history, now = state_history.ActiveHistory(), utcnow()
    first = history.read(session, observe.job_counts(session), now=now)
    assert first == state_history.active_history(session, now=now)
    # a job queued since: the current point has it at once, the finished minutes are kept
    reply = client.post(
        "/v1/classifiers",
        files=nlc_files(INTENTS_NLC, {"name": "kept", "language": "en"}),
        headers=tenant.headers,
    )
    assert reply.status_code == 200, reply.text
    counts = observe.job_counts(session)
    again = history.read(session, counts, now=now)
    assert again[:-1] == first[:-1] and again[-1]["queued"] == counts["queued"] == first[-1]["queued"] + 1
    # and the next minute reads the timeline again
    later = now + timedelta(minutes=1)
    assert history.read(session, counts, now=later) == state_history.active_history(session, now=later)
