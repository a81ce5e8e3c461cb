"""The wiring of status webhooks: a real `python -m workers.webhook_worker` process on the machine's
Redis delivers every status change of a classifier to a real local receiver that is down (503)
for the first attempts; once it is back it has every event, and after deduplicating by event id
exactly one per change, each signed with the tenant's secret. A message lost with Redis is sent
again by the worker's sweep.

The sweep sends every pending event in the database, so these tests run on a database of their
own (``database_url`` is overridden here).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.client.webhooks import SIGNATURE_HEADER, verify
from service.core.models import Delivery, StatusEvent, TrainingJob, utcnow
from service.core.settings import Settings
from service.training import leases
from tests.conftest import TenantHandle, empty_redis_db, migrated_database, redis_test_url
from tests.service.helpers import nlc_files
from tests.webhook_receiver import Receiver, running_receiver

pytestmark = pytest.mark.integration

BROKER_URL = redis_test_url(10)
WEBHOOK_ENV = {  # a local receiver is allowed; quick back-off, sweep and re-send
    "TAAS_WEBHOOK_ALLOW_PRIVATE": "1",
    "TAAS_WEBHOOK_BACKOFF_SECONDS": "0.3",
    "TAAS_WEBHOOK_BACKOFF_MAX_SECONDS": "1",
    "TAAS_WEBHOOK_SWEEP_SECONDS": "0.2",
    "TAAS_WEBHOOK_RESEND_GRACE_SECONDS": "2",
}


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated database of this test's own (no other test's pending events in it)."""
    with migrated_database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def broker() -> Iterator[redis.Redis]:
    """Redis db 10 of the machine's server, emptied before and after the test."""
    with empty_redis_db(BROKER_URL) as client:
        yield client


@pytest.fixture
def settings(settings_factory: Callable[..., Settings], broker: redis.Redis) -> Settings:
    """The API's settings: the test broker, and local receivers allowed."""
    return settings_factory(redis_url=BROKER_URL, webhook_allow_private=True)


@pytest.fixture
def start_webhook_worker(
    settings: Settings, tmp_path: Path
) -> Iterator[Callable[[], subprocess.Popen[bytes]]]:
    """Start `python -m workers.webhook_worker` on ``settings``; stopped (SIGTERM) after the test."""
    started: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "TAAS_DATABASE_URL": settings.resolved_database_url(),
            "TAAS_REDIS_URL": BROKER_URL,
            "TAAS_DATA_DIR": str(settings.data_dir),
            "TAAS_SECRETS_KEY": str(settings.secrets_key),  # the API's: it opens what the API sealed
            **WEBHOOK_ENV,
        }
        with open(tmp_path / "webhooks.log", "ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "workers.webhook_worker"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        started.append(process)
        return process

    yield start
    for process in started:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _create(client: TestClient, tenant: TenantHandle, receiver: Receiver) -> str:
    metadata = {"language": "en", "name": "hooked", "callback_url": receiver.url}
    reply = client.post("/v1/classifiers", files=nlc_files(metadata=metadata), headers=tenant.headers)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["classifier_id"])


def _pending(session: Session) -> int:
    session.rollback()
    return len(
        session.scalars(select(StatusEvent.id).where(StatusEvent.delivery == Delivery.PENDING.value)).all()
    )


def test_a_receiver_down_at_first_gets_each_status_change_once_signed(
    client: TestClient,
    tenant: TenantHandle,
    session: Session,
    start_webhook_worker: Callable[[], subprocess.Popen[bytes]],
    wait_until: Callable[..., Any],
    tmp_path: Path,
) -> None:
    worker = start_webhook_worker()
    with running_receiver(answers=[503] * 4) as receiver:
        # given: a classifier whose every status change is POSTed to the receiver
        classifier_id = _create(client, tenant, receiver)
        base = f"/v1/classifiers/{classifier_id}"
        # when: the tenant cancels and resumes it (API commits), a worker trains it (a worker's commit)
        assert client.post(f"{base}/cancel", headers=tenant.headers).status_code == 200
        assert client.post(f"{base}/resume", headers=tenant.headers).status_code == 200
        job_id = session.scalar(select(TrainingJob.id).where(TrainingJob.classifier_id == classifier_id))
        lease = leases.claim_job(session, str(job_id), "w", now=utcnow(), lease=timedelta(seconds=60))
        assert lease is not None
        assert leases.finish_job(session, lease, model_dir="m", metrics={}, now=utcnow())
        # then
        wait_until(
            lambda: _pending(session) == 0,
            timeout=60,
            interval=0.2,
            message=f"every event delivered; the worker's log: {tmp_path / 'webhooks.log'}",
        )

    secret = client.get("/v1/webhook_secret", headers=tenant.headers).json()["secret"]
    for request in receiver.all():
        verify(secret, request.body, request.headers[SIGNATURE_HEADER])
    assert [r.answered for r in receiver.all()].count(503) == 4
    kept = {r.event["id"]: r.event for r in receiver.accepted()}  # the receiver dedupes by id
    assert len(kept) == len(receiver.accepted()) == 4
    changes = sorted(kept.values(), key=lambda event: event["created"])
    assert [(e["previous_status"], e["status"]) for e in changes] == [
        ("Non Existent", "Training"),
        ("Training", "Unavailable"),
        ("Unavailable", "Training"),
        ("Training", "Available"),
    ]
    listed = client.get(f"{base}/events", headers=tenant.headers).json()["status_events"]
    assert {e["id"] for e in listed} == set(kept) and {e["delivery"] for e in listed} == {"delivered"}
    attempts = [a for e in listed for a in e["attempts"]]
    assert sorted(a["status_code"] for a in attempts) == [200] * 4 + [503] * 4
    worker.terminate()
    assert worker.wait(timeout=30) == 0, (tmp_path / "webhooks.log").read_text(errors="replace")


def test_an_event_whose_message_was_lost_with_redis_is_sent_by_the_sweep(
    client: TestClient,
    tenant: TenantHandle,
    session: Session,
    broker: redis.Redis,
    start_webhook_worker: Callable[[], subprocess.Popen[bytes]],
    wait_until: Callable[..., Any],
    tmp_path: Path,
) -> None:
    with running_receiver() as receiver:
        classifier_id = _create(client, tenant, receiver)
        broker.flushdb()  # Redis restarted without its data: the message is gone
        start_webhook_worker()

        wait_until(
            lambda: receiver.accepted(),
            timeout=60,
            interval=0.2,
            message=f"the event re-sent; the worker's log: {tmp_path / 'webhooks.log'}",
        )

        # the worker records the delivery once the receiver has answered: after this wait
        wait_until(lambda: _pending(session) == 0, timeout=30, interval=0.2, message="the delivery recorded")

    [got] = receiver.accepted()
    assert got.event["classifier_id"] == classifier_id and got.event["status"] == "Training"


def test_a_tenant_whose_receiver_hangs_does_not_hold_up_another_tenants_events(
    client: TestClient,
    tenant_factory: Callable[..., TenantHandle],
    session: Session,
    start_webhook_worker: Callable[[], subprocess.Popen[bytes]],
    wait_until: Callable[..., Any],
    tmp_path: Path,
) -> None:
    """Tenant A's receiver hangs until tenant B's event has arrived. With one attempt per tenant
    in flight, B's event reaches B while at most A's first attempt hangs;
    with none (before), A's four events took the worker's four threads, and B's waited until
    they timed out."""
    other_arrived = threading.Event()
    arrived_for_a: list[None] = []
    seen_by_b: list[int] = []

    def hang_until_the_other_arrives() -> None:
        arrived_for_a.append(None)
        other_arrived.wait(timeout=20)

    def note_how_many_of_a_arrived() -> None:
        seen_by_b.append(len(arrived_for_a))
        other_arrived.set()

    start_webhook_worker()
    with (
        running_receiver(on_request=hang_until_the_other_arrives) as slow,
        running_receiver(on_request=note_how_many_of_a_arrived) as fast,
    ):
        hanging, waiting = tenant_factory("a"), tenant_factory("b")
        for _ in range(4):
            _create(client, hanging, slow)
        _create(client, waiting, fast)

        wait_until(
            lambda: _pending(session) == 0,
            timeout=60,
            interval=0.2,
            message=f"every event delivered; the worker's log: {tmp_path / 'webhooks.log'}",
        )

    [a_attempts_made] = seen_by_b  # when B's event arrived: A's first, or none yet
    assert a_attempts_made <= 1
    assert len(slow.accepted()) == 4  # each once: none timed out
