"""The wiring: real `python -m workers` processes on the machine's Redis pick up jobs that the
service enqueued by task name, train them, and take them in fair order.

A wake-up message makes a worker take the fairest claimable job in the whole database, so
these tests run on a database of their own (``database_url`` is overridden here).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from benchmarks.chaos import NGRAM_LANGUAGE
from service.core.models import (
    Classifier,
    ClassifierStatus,
    ClassifierVersion,
    Evaluation,
    EvaluationState,
    JobEvent,
    JobState,
    TrainingJob,
    utcnow,
)
from service.core.settings import Settings
from service.training import evaluations
from service.training.queue import enqueue_evaluation
from tests.conftest import empty_redis_db, migrated_database, redis_test_url

pytestmark = pytest.mark.integration

BROKER_URL = redis_test_url(14)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated database of this test's own (no other test's queued jobs in it)."""
    with migrated_database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def broker() -> Iterator[str]:
    """Redis db 14 of the machine's server, emptied before and after the test."""
    with empty_redis_db(BROKER_URL):
        yield BROKER_URL


def _states(session: Session, job_ids: list[str]) -> set[str]:
    session.rollback()
    return set(session.scalars(select(TrainingJob.state).where(TrainingJob.id.in_(job_ids))))


def _timeline(session: Session, job_ids: list[str]) -> list[JobEvent]:
    """The jobs' events, oldest first."""
    return list(
        session.scalars(
            select(JobEvent).where(JobEvent.job_id.in_(job_ids)).order_by(JobEvent.at, JobEvent.id)
        )
    )


def _yielded(events: list[JobEvent]) -> list[str]:
    """The jobs released to give their slot to a tenant holding fewer, once per release."""
    return [e.job_id for e in events if e.kind == "queued" and "holding fewer" in (e.detail or "")]


@pytest.mark.slow
def test_worker_process_trains_a_job_enqueued_by_task_name(
    broker: str,
    settings_factory: Callable[..., Settings],
    queue_job: Callable[..., Any],
    start_workers: Callable[..., list[subprocess.Popen[bytes]]],
    intents_csv: Path,
    session: Session,
    tmp_path: Path,
    wait_until: Callable[..., Any],
) -> None:
    settings = settings_factory(redis_url=broker)
    [worker] = start_workers(settings)
    queued = queue_job(intents_csv, settings)

    wait_until(
        lambda: _states(session, [queued.job_id]) == {JobState.SUCCEEDED},
        timeout=120,
        interval=0.2,
        message=f"job trained by the worker process; its log: {tmp_path / 'worker-0.log'}",
    )
    classifier = session.get(Classifier, queued.classifier_id)
    assert classifier is not None and classifier.status == ClassifierStatus.AVAILABLE

    # an evaluation goes by its own queue, which the same worker consumes
    version = session.scalars(
        select(ClassifierVersion).where(ClassifierVersion.classifier_id == classifier.id)
    ).one()
    texts = ["will it rain in rome", "book a flight to rome", "play some jazz in rome"]
    evaluation = evaluations.create_evaluation(
        session,
        classifier,
        version,
        name="t",
        texts=texts,
        labels=["weather", "flights", "music"],
        now=utcnow(),
    )
    enqueue_evaluation(settings, evaluation.id)
    wait_until(
        lambda: _evaluation_state(session, evaluation.id) == EvaluationState.COMPLETED,
        timeout=60,
        interval=0.2,
        message=f"evaluation run by the worker process; its log: {tmp_path / 'worker-0.log'}",
    )
    report = session.get(Evaluation, evaluation.id).report  # type: ignore[union-attr]
    assert report is not None and report["n"] == 3 and report["accuracy"] == 1.0
    worker.terminate()
    assert worker.wait(timeout=30) == 0, (tmp_path / "worker-0.log").read_text(errors="replace")


def _evaluation_state(session: Session, evaluation_id: str) -> str | None:
    session.rollback()
    return session.scalar(select(Evaluation.state).where(Evaluation.id == evaluation_id))


@pytest.mark.slow
def test_two_workers_start_a_single_job_at_the_first_free_slot_behind_a_backlog(
    broker: str,
    settings_factory: Callable[..., Settings],
    queue_job: Callable[..., Any],
    start_workers: Callable[..., list[subprocess.Popen[bytes]]],
    intents_csv: Path,
    session: Session,
    wait_until: Callable[..., Any],
) -> None:
    settings = settings_factory(redis_url=broker)
    start_workers(settings, 2, TAAS_LEARNERS="1")
    # n-gram jobs: the test is about the order of the claims, not the model (the encoder's is
    # the first test's)
    first = queue_job(intents_csv, settings, language=NGRAM_LANGUAGE)
    backlog = [first] + [queue_job(intents_csv, settings, first.tenant_id, NGRAM_LANGUAGE) for _ in range(5)]
    single = queue_job(intents_csv, settings, language=NGRAM_LANGUAGE)  # tenant B's one job, behind A's
    every = [q.job_id for q in backlog] + [single.job_id]

    wait_until(
        lambda: _states(session, every) == {JobState.SUCCEEDED},
        timeout=300,
        interval=0.5,
        message="every job trained by the two workers",
    )
    events = _timeline(session, every)
    claims = [e.job_id for e in events if e.kind == "claimed"]
    yielded = _yielded(events)
    # each job claimed once, and once more after each time it gave its slot to B: no double
    # run, none lost; A gives back at most the one slot that B's single job needs
    assert sorted(claims) == sorted(every + yielded) and len(yielded) <= 1
    b_created = session.get(TrainingJob, single.job_id).created_at  # type: ignore[union-attr]
    b_claimed = next(e.at for e in events if e.kind == "claimed" and e.job_id == single.job_id)
    a_claims_between = [
        e
        for e in events
        if e.kind == "claimed" and e.job_id != single.job_id and b_created < e.at < b_claimed
    ]
    # B's job is the next one claimed once it is queued (one A claim may have been under way)
    assert len(a_claims_between) <= 1, a_claims_between
    finished_before_b = [e for e in events if e.kind == "done" and b_created < e.at < b_claimed]
    assert len(finished_before_b) <= 1 + len(a_claims_between)  # started at the first free slot


@pytest.mark.slow
def test_a_tenant_holding_both_slots_gives_one_to_a_tenant_that_arrives(
    broker: str,
    settings_factory: Callable[..., Settings],
    queue_job: Callable[..., Any],
    start_workers: Callable[..., list[subprocess.Popen[bytes]]],
    intents_csv: Path,
    session: Session,
    wait_until: Callable[..., Any],
    tmp_path: Path,
) -> None:
    # the small data's five fold models make each job about six times longer (some 10 s), so
    # that A's two jobs are surely still training when B's arrives
    settings = settings_factory(redis_url=broker, cross_fit_folds=5)
    start_workers(settings, 2, TAAS_LEARNERS="1", TAAS_HEARTBEAT_SECONDS="0.5")
    first = queue_job(
        intents_csv, settings, language=NGRAM_LANGUAGE
    )  # the one that yields resumes a checkpoint
    a_jobs = [first.job_id, queue_job(intents_csv, settings, first.tenant_id, NGRAM_LANGUAGE).job_id]
    wait_until(
        lambda: _states(session, a_jobs) == {JobState.TRAINING},
        timeout=60,
        interval=0.1,
        message="both workers training tenant A's jobs",
    )
    # tenant B arrives while A holds every slot (n-grams too: its English model's encoder and six
    # fold models took the longest of the test, and only its start is checked)
    single = queue_job(intents_csv, settings, language=NGRAM_LANGUAGE)

    wait_until(
        lambda: _states(session, [single.job_id]) != {JobState.QUEUED},
        timeout=60,
        interval=0.1,
        message="B's job started",
    )
    assert _states(session, a_jobs) & {JobState.TRAINING, JobState.QUEUED}, "A's jobs had not ended"
    wait_until(
        lambda: _states(session, [*a_jobs, single.job_id]) == {JobState.SUCCEEDED},
        timeout=300,
        interval=0.5,
        message="every job trained",
    )
    events = _timeline(session, a_jobs)
    yielded = _yielded(events)
    logs = "".join(path.read_text() for path in sorted(tmp_path.glob("worker-*.log")))
    if len(yielded) != 1:  # the story printed whole (an assertion's is cut)
        for e in _timeline(session, [*a_jobs, single.job_id]):
            print(f"{e.at:%H:%M:%S.%f}", e.job_id[:8], e.kind, e.epoch, e.worker_id, e.step, e.detail)
        print(logs)
    assert len(yielded) == 1, f"{len(yielded)} yields: the jobs' events and the workers' logs are printed"
    timeline = [e.kind for e in events if e.job_id == yielded[0]]
    after = timeline[timeline.index("queued", 1) :]  # from its release on
    assert after[:3] == ["queued", "claimed", "resumed"] and after[-1] == "done", timeline
    # the release is news, not trouble: one INFO line, where Celery's policy is a WARNING and
    # a traceback for every Reject
    rejected = [line for line in logs.splitlines() if "] reject requeue=True: " in line]
    assert len(rejected) == 1 and "INFO/" in rejected[0] and "holding fewer" in rejected[0], logs
    assert "Traceback" not in logs, logs
