"""Every change of a classifier's status records exactly one status event, in the transaction
that makes it, whichever path makes it (the API, a worker, the reconciler); a lost
compare-and-set records none. The events route lists them, tenant-scoped; a create names its
callback URL, which the SSRF guard checks; the tenant reads and rotates its signing secret."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.core.models import ClassifierStatus, Delivery, StatusEvent, TrainingJob, utcnow
from service.training import jobs, leases, status_events
from tests.conftest import TenantHandle
from tests.service.helpers import nlc_files

PUBLIC_HOOK = "http://93.184.216.34/hooks/taas"  # a public address literal: no resolver needed
LEASE = timedelta(seconds=60)
BACKOFF = jobs.BackOff(base_seconds=0, max_seconds=0)
NON_EXISTENT, TRAINING, AVAILABLE, FAILED, UNAVAILABLE = (
    ClassifierStatus.NON_EXISTENT.value,
    ClassifierStatus.TRAINING.value,
    ClassifierStatus.AVAILABLE.value,
    ClassifierStatus.FAILED.value,
    ClassifierStatus.UNAVAILABLE.value,
)


@pytest.fixture
def created(
    tenant: TenantHandle, create_classifier: Callable[..., httpx.Response], session: Session
) -> Callable[..., tuple[str, str]]:
    """``created(callback_url=None) -> (classifier_id, job_id)``: an NLC create by ``tenant``."""

    def create(callback_url: str | None = None) -> tuple[str, str]:
        metadata: dict[str, Any] = {"language": "en", "name": "weather"}
        if callback_url:
            metadata["callback_url"] = callback_url
        reply = create_classifier(tenant, metadata=metadata)
        assert reply.status_code == 200, reply.text
        classifier_id = reply.json()["classifier_id"]
        job_id = session.scalar(select(TrainingJob.id).where(TrainingJob.classifier_id == classifier_id))
        assert job_id is not None
        return classifier_id, job_id

    return create


def _changes(session: Session, classifier_id: str) -> list[tuple[str, str]]:
    session.rollback()
    events = session.scalars(
        select(StatusEvent).where(StatusEvent.classifier_id == classifier_id).order_by(StatusEvent.created_at)
    )
    return [(e.previous_status, e.status) for e in events]


def _claim(session: Session, job_id: str, at: datetime) -> jobs.JobLease:
    lease = leases.claim_job(session, job_id, "w1", now=at, lease=LEASE)
    assert lease is not None
    return lease


def test_create_claim_and_finish_record_one_event_per_status_change(
    session: Session, created: Callable[..., tuple[str, str]]
) -> None:
    classifier_id, job_id = created()
    lease = _claim(session, job_id, utcnow())
    assert leases.record_progress(session, lease, {"step": 1}, now=utcnow())

    assert leases.finish_job(session, lease, model_dir="m", metrics={}, now=utcnow())

    assert _changes(session, classifier_id) == [(NON_EXISTENT, TRAINING), (TRAINING, AVAILABLE)]


def test_cancel_and_resume_by_the_tenant_record_their_changes(
    client: TestClient, tenant: TenantHandle, session: Session, created: Callable[..., tuple[str, str]]
) -> None:
    classifier_id, _ = created()
    base = f"/v1/classifiers/{classifier_id}"

    assert client.post(f"{base}/cancel", headers=tenant.headers).status_code == 200
    assert client.post(f"{base}/cancel", headers=tenant.headers).status_code == 409
    assert client.post(f"{base}/resume", headers=tenant.headers).status_code == 200

    assert _changes(session, classifier_id) == [
        (NON_EXISTENT, TRAINING),
        (TRAINING, UNAVAILABLE),
        (UNAVAILABLE, TRAINING),
    ]


def test_a_change_that_read_the_clock_first_but_locked_second_is_ordered_second(
    session: Session, created: Callable[..., tuple[str, str]]
) -> None:
    """Two racing requests: the cancel read the clock before the resume did, but the resume
    took the classifier's lock first. Ordered by ``created``, the events must follow the
    changes as they were made, or a receiver ends on the wrong status."""
    classifier_id, _ = created()
    before = utcnow() - timedelta(seconds=5)
    assert jobs.cancel_job(session, classifier_id, now=before)

    assert _changes(session, classifier_id) == [(NON_EXISTENT, TRAINING), (TRAINING, UNAVAILABLE)]
    events = session.scalars(select(StatusEvent).where(StatusEvent.classifier_id == classifier_id))
    at = {event.status: event.created_at for event in events}
    assert at[UNAVAILABLE] - at[TRAINING] >= status_events.AFTER_THE_LAST


def test_a_worker_failure_records_failed_but_a_retry_records_nothing(
    session: Session, created: Callable[..., tuple[str, str]]
) -> None:
    retried, retried_job = created()
    failed, failed_job = created()

    first = _claim(session, retried_job, utcnow())
    assert (
        leases.retry_job(session, first, reason="oom", max_attempts=2, backoff=BACKOFF, now=utcnow())
        == "retry"
    )
    second = _claim(session, retried_job, utcnow())
    assert (
        leases.retry_job(session, second, reason="oom", max_attempts=2, backoff=BACKOFF, now=utcnow())
        == "failed"
    )
    assert leases.fail_job(session, _claim(session, failed_job, utcnow()), reason="bad data", now=utcnow())

    for classifier_id in (retried, failed):
        assert _changes(session, classifier_id) == [(NON_EXISTENT, TRAINING), (TRAINING, FAILED)]


def test_the_reconciler_failing_an_expired_job_records_failed(
    session: Session, created: Callable[..., tuple[str, str]]
) -> None:
    classifier_id, job_id = created()
    start = utcnow()
    _claim(session, job_id, start)

    verdict = jobs.requeue_expired(session, job_id, max_attempts=1, backoff=BACKOFF, now=start + 2 * LEASE)

    assert verdict == "failed"
    assert _changes(session, classifier_id) == [(NON_EXISTENT, TRAINING), (TRAINING, FAILED)]


def test_a_lost_compare_and_set_records_no_event(
    session: Session, created: Callable[..., tuple[str, str]]
) -> None:
    classifier_id, job_id = created()
    start = utcnow()
    stale = _claim(session, job_id, start)
    assert jobs.requeue_expired(session, job_id, max_attempts=3, backoff=BACKOFF, now=start + 2 * LEASE)

    assert not leases.finish_job(session, stale, model_dir="m", metrics={}, now=utcnow())
    assert not leases.fail_job(session, stale, reason="late", now=utcnow())
    assert jobs.resume_jobs(session, classifier_id, [job_id], now=utcnow()) == []

    assert _changes(session, classifier_id) == [(NON_EXISTENT, TRAINING)]


def test_an_event_names_the_callback_url_of_its_job_and_waits_for_delivery(
    session: Session, created: Callable[..., tuple[str, str]]
) -> None:
    with_hook, _ = created(PUBLIC_HOOK)
    without, _ = created()

    session.rollback()
    hooked = session.scalars(select(StatusEvent).where(StatusEvent.classifier_id == with_hook)).one()
    quiet = session.scalars(select(StatusEvent).where(StatusEvent.classifier_id == without)).one()
    assert (hooked.callback_url, hooked.delivery) == (PUBLIC_HOOK, Delivery.PENDING)
    assert hooked.next_attempt_at is not None and hooked.type == "classifier.status_changed"
    assert (quiet.callback_url, quiet.delivery, quiet.next_attempt_at) == (None, Delivery.NONE, None)


def test_the_events_route_lists_status_events_newest_first_for_their_owner_only(
    client: TestClient,
    tenant: TenantHandle,
    tenant_factory: Callable[..., TenantHandle],
    created: Callable[..., tuple[str, str]],
) -> None:
    classifier_id, _ = created(PUBLIC_HOOK)
    path = f"/v1/classifiers/{classifier_id}/events"
    assert client.post(f"/v1/classifiers/{classifier_id}/cancel", headers=tenant.headers).status_code == 200

    reply = client.get(path, headers=tenant.headers)
    foreign = client.get(path, headers=tenant_factory().headers)

    assert reply.status_code == 200, reply.text
    listed = reply.json()["status_events"]
    assert [(e["previous_status"], e["status"]) for e in listed] == [
        (TRAINING, UNAVAILABLE),
        (NON_EXISTENT, TRAINING),
    ]
    assert (listed[0]["callback_url"], listed[0]["delivery"], listed[0]["attempts"]) == (
        PUBLIC_HOOK,
        "pending",
        [],
    )
    assert set(listed[0]) >= {"id", "type", "created", "status_description", "next_attempt", "attempts"}
    assert [e["event"] for e in reply.json()["events"]] == ["queued", "cancelled"]  # the timeline
    assert foreign.status_code == 404


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1:8080/hook", "loopback"),
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://10.0.0.7/hook", "private"),
        ("http://localhost/hook", "loopback"),
        ("file:///etc/passwd", "http:// or https://"),
        (42, "must be a string"),
    ],
)
def test_an_unsafe_callback_url_is_400_naming_the_field_and_keeps_nothing(
    client: TestClient,
    tenant: TenantHandle,
    create_classifier: Callable[..., httpx.Response],
    nothing_left_behind: Callable[[str], None],
    url: object,
    why: str,
) -> None:
    nlc = create_classifier(tenant, metadata={"language": "en", "name": "w", "callback_url": url})
    from_dataset = client.post(
        "/v1/classifiers",
        json={"name": "w", "language": "en", "dataset_id": "unknown", "callback_url": url},
        headers=tenant.headers,
    )

    assert nlc.status_code == 400, nlc.text
    assert nlc.json()["description"].startswith("training_metadata.callback_url: ")
    assert why in nlc.json()["description"]
    assert from_dataset.status_code == 400, from_dataset.text
    assert from_dataset.json()["description"].startswith("callback_url")
    nothing_left_behind(tenant.id)


def test_the_tenant_reads_and_rotates_its_own_webhook_secret(
    client: TestClient, tenant: TenantHandle, tenant_factory: Callable[..., TenantHandle]
) -> None:
    first = client.get("/v1/webhook_secret", headers=tenant.headers).json()["secret"]
    other = client.get("/v1/webhook_secret", headers=tenant_factory().headers).json()["secret"]

    rotated = client.post("/v1/webhook_secret", headers=tenant.headers)

    assert first.startswith("whsec_") and len(first) > 40 and first != other
    assert rotated.status_code == 200
    assert rotated.json()["secret"] not in (first, other)
    assert client.get("/v1/webhook_secret", headers=tenant.headers).json() == rotated.json()


def test_deleting_a_classifier_tells_every_callback_url_its_versions_named(
    client: TestClient, tenant: TenantHandle, session: Session, created: Callable[..., tuple[str, str]]
) -> None:
    """Version 1 named one URL, version 2 another: both heard of the classifier until now, so
    both hear of its deletion (before, only the shown version's did)."""
    classifier_id, _ = created(PUBLIC_HOOK)
    other_hook = "http://93.184.216.35/hooks/other"
    files = nlc_files(metadata={"callback_url": other_hook})
    made = client.post(f"/v1/classifiers/{classifier_id}/versions", files=files, headers=tenant.headers)
    assert made.status_code == 201, made.text

    assert client.delete(f"/v1/classifiers/{classifier_id}", headers=tenant.headers).status_code == 200

    session.rollback()
    deleted = session.scalars(
        select(StatusEvent).where(
            StatusEvent.classifier_id == classifier_id, StatusEvent.status == NON_EXISTENT
        )
    ).all()
    assert len(deleted) == 2 and {e.callback_url for e in deleted} == {PUBLIC_HOOK, other_hook}
    assert {e.description for e in deleted} == {"The classifier was deleted."}


def test_a_long_lived_classifier_keeps_only_the_events_a_listing_shows_and_those_still_to_deliver(
    session: Session, created: Callable[..., tuple[str, str]]
) -> None:
    # A classifier retrained (and its old versions deleted) for months records a few events per
    # version; only the newest LISTED_EVENTS are ever listed, and a delivered one is never sent
    # again: the rest were kept for ever, unreadable (a soak: 4 rows per retrain, none pruned).
    classifier_id, _ = created()
    owner = select(TrainingJob.tenant_id).where(TrainingJob.classifier_id == classifier_id)
    tenant_id = session.scalar(owner)
    assert tenant_id is not None
    at = utcnow()

    def add(n: int, callback_url: str | None) -> None:
        for i in range(n):
            status_events.record(
                session,
                tenant_id=tenant_id,
                classifier_id=classifier_id,
                version=1,
                previous=TRAINING,
                status=AVAILABLE,
                description=f"change {i}",
                callback_url=callback_url,
                now=at,
            )
            session.commit()

    add(3, PUBLIC_HOOK)  # the oldest: still to deliver, so they stay whatever follows
    add(status_events.LISTED_EVENTS + 50, None)

    session.rollback()
    kept = session.scalars(select(StatusEvent).where(StatusEvent.classifier_id == classifier_id)).all()
    listed = [event.id for event, _ in status_events.recent_events(session, classifier_id)]
    pending = {e.id for e in kept if e.delivery == Delivery.PENDING.value}
    assert len(pending) == 3
    assert {e.id for e in kept} == set(listed) | pending
    assert len(kept) == status_events.LISTED_EVENTS + 3
