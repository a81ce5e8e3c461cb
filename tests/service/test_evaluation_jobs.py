"""An evaluation's life as a job, on both databases and the machine's Redis: the claim is a
compare-and-set fenced by its attempt, a lost worker's evaluation goes back to the queue and its
message is sent again, a model that cannot load fails it with the reason."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from service.core.db import make_engine, session_factory
from service.core.models import Classifier, ClassifierVersion, Evaluation, EvaluationState
from service.core.settings import Settings
from service.storage.store import ArtifactStore
from service.training import evaluations
from service.training.queue import EVALUATION_QUEUE
from tests.conftest import TenantHandle, empty_redis_db, redis_test_url
from workers.evaluation_run import run_evaluation
from workers.reconciler import queued_job_ids, reconcile_once

pytestmark = pytest.mark.integration

BROKER_URL = redis_test_url(14)
HOLD = timedelta(seconds=10)


@pytest.fixture
def broker() -> Iterator[redis.Redis]:
    with empty_redis_db(BROKER_URL) as client:
        yield client


def _queued(session: Session, classifier_id: str) -> str:
    """A queued evaluation of the classifier's version 1 on three rows; its id."""
    classifier = session.get(Classifier, classifier_id)
    version = session.query(ClassifierVersion).filter_by(classifier_id=classifier_id, number=1).one()
    assert classifier is not None
    texts, labels = ["is it cold", "will it snow", "is it hot"], ["temperature", "conditions", "temperature"]
    found = evaluations.create_evaluation(
        session, classifier, version, name="t", texts=texts, labels=labels, now=datetime.now(UTC)
    )
    return found.id


def _row(session: Session, evaluation_id: str) -> Evaluation:
    session.rollback()
    session.expire_all()
    found = session.get(Evaluation, evaluation_id)
    assert found is not None
    return found


def test_a_lost_workers_evaluation_is_given_back_sent_again_and_fails_after_max_attempts(
    broker: redis.Redis,
    settings_factory: Callable[..., Settings],
    available: str,
    session: Session,
) -> None:
    settings = settings_factory(redis_url=BROKER_URL, max_attempts=2)
    evaluation_id = _queued(session, available)  # recorded, its message never sent
    engine = make_engine(settings)
    sessions = session_factory(engine)
    now = datetime.now(UTC) + timedelta(seconds=11)  # past the grace for a missing message
    try:
        assert evaluation_id in reconcile_once(settings, sessions, now=now).evaluations_sent
        assert queued_job_ids(BROKER_URL, EVALUATION_QUEUE).count(evaluation_id) == 1  # (and others' tests')
        assert (
            evaluation_id not in reconcile_once(settings, sessions, now=now).evaluations_sent
        )  # in the queue

        broker.delete(EVALUATION_QUEUE)  # a worker took the message
        first = evaluations.claim(session, evaluation_id, now=now, hold=HOLD)
        assert first is not None and first.attempt == 1 and first.texts[0] == "is it cold"
        assert evaluations.claim(session, evaluation_id, now=now, hold=HOLD) is None  # held
        now += timedelta(seconds=11)  # the worker died: its lease runs out
        report = reconcile_once(settings, sessions, now=now)
        assert evaluation_id in report.evaluations_requeued and evaluation_id in report.evaluations_sent
        assert _row(session, evaluation_id).state == EvaluationState.QUEUED

        second = evaluations.claim(session, evaluation_id, now=now, hold=HOLD)
        assert second is not None and second.attempt == 2
        # the first worker, back from the dead, writes nothing
        assert not evaluations.record_progress(session, evaluation_id, 1, 2, now=now, hold=HOLD)
        assert not evaluations.complete(session, evaluation_id, 1, {"accuracy": 0.0}, now=now)
        now += timedelta(seconds=11)
        assert evaluation_id in reconcile_once(settings, sessions, now=now).evaluations_failed
        failed = _row(session, evaluation_id)
        assert failed.state == EvaluationState.FAILED and "stopped 2 times" in (failed.error or "")
        assert failed.test_rows is None and failed.report is None
    finally:
        engine.dispose()


def test_a_model_that_cannot_be_loaded_fails_the_evaluation_with_the_reason(
    settings: Settings, available: str, session: Session, store: ArtifactStore
) -> None:
    evaluation_id = _queued(session, available)
    version = session.query(ClassifierVersion).filter_by(classifier_id=available, number=1).one()
    assert version.model_dir is not None
    (store.resolve(version.model_dir) / "weights.pt").write_bytes(b"not the weights")
    assert run_evaluation(evaluation_id, settings) == "failed"
    failed = _row(session, evaluation_id)
    assert failed.state == EvaluationState.FAILED
    assert "cannot be loaded" in (failed.error or "") and "checksum" in (failed.error or "")


def test_an_evaluation_deleted_while_it_runs_stops_and_writes_nothing(
    settings: Settings,
    available: str,
    session: Session,
    client: TestClient,
    tenant: TenantHandle,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    evaluation_id = _queued(session, available)
    from trainer import evaluation_report

    monkeypatch.setattr(evaluation_report, "CHUNK", 1)  # a progress report after each text
    answered = evaluation_report.LoadedModel.probabilities

    def answer_then_delete(self: object, *args: object, **kwargs: object) -> object:
        found = answered(self, *args, **kwargs)  # type: ignore[arg-type]
        client.delete(f"/v1/classifiers/{available}/evaluations/{evaluation_id}", headers=tenant.headers)
        return found

    monkeypatch.setattr(evaluation_report.LoadedModel, "probabilities", answer_then_delete)
    assert run_evaluation(evaluation_id, settings) == "lost"
    session.rollback()
    assert session.get(Evaluation, evaluation_id) is None
