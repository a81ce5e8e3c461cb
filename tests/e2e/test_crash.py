"""Crash tests against real processes: `taas up` (API, reconciler, workers, Redis) on SQLite and
the embedded Redis, and on PostgreSQL with a Redis server of the test's own. Each scenario of
``benchmarks/chaos.py`` injects one fault into a real process and audits the job timeline:
no job lost, none trained twice, the work lost at most one checkpoint interval."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import chaos

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# Measured with the default lease (10 s), heartbeat (2 s) and reconcile interval (2 s).
SIGKILL_TO_RESUME_LIMIT_S = 30.0


def _services_reachable() -> str | None:
    try:
        import psycopg

        psycopg.connect(chaos.PG_SERVER, connect_timeout=3).close()
    except Exception as error:
        return f"PostgreSQL at 127.0.0.1:5432 is unreachable: {error}"
    return None


@pytest.fixture(params=["embedded", "services"])
def flavour(request: pytest.FixtureRequest) -> str:
    """embedded: SQLite + `taas up`'s own Redis; services: PostgreSQL + an external Redis."""
    if request.param == "services" and (reason := _services_reachable()):
        pytest.skip(reason)
    return str(request.param)


def _check(outcome: chaos.Outcome) -> None:
    line = outcome.line()
    assert outcome.passed, line
    assert (line["jobs_lost"], line["jobs_double_trained"]) == (0, 0), line


def test_sigkilled_worker_and_learners_resume_from_the_last_checkpoint_within_30s(
    tmp_path: Path, flavour: str
) -> None:
    outcome = chaos.worker_sigkill(tmp_path, flavour)

    _check(outcome)
    assert outcome.fault_to_resume_s is not None and outcome.fault_to_resume_s <= SIGKILL_TO_RESUME_LIMIT_S
    assert outcome.work_lost_updates is not None
    assert outcome.work_lost_updates <= chaos.CHECKPOINT_EVERY_UPDATES


def test_redis_killed_and_restarted_mid_training_loses_and_repeats_no_job(
    tmp_path: Path, flavour: str
) -> None:
    _check(chaos.redis_restart(tmp_path, flavour))


def test_api_killed_mid_training_and_mid_upload_loses_nothing_and_leaves_nothing(
    tmp_path: Path, flavour: str
) -> None:
    _check(chaos.api_restart(tmp_path, flavour))


def test_duplicate_messages_to_two_workers_train_the_job_exactly_once(tmp_path: Path, flavour: str) -> None:
    _check(chaos.duplicate_delivery(tmp_path, flavour))


def test_failed_checkpoint_write_keeps_the_previous_one_and_the_retry_resumes_from_it(
    tmp_path: Path, flavour: str
) -> None:
    outcome = chaos.checkpoint_write_failure(tmp_path, flavour)

    _check(outcome)
    assert outcome.work_lost_updates is not None
    assert outcome.work_lost_updates <= chaos.CHECKPOINT_EVERY_UPDATES


def test_poison_dataset_fails_after_max_attempts_while_another_tenant_finishes(
    tmp_path: Path, flavour: str
) -> None:
    _check(chaos.poison_dataset(tmp_path, flavour))
