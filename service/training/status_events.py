"""Classifier status events: recorded in the transaction that changes the status, read back with
their webhook delivery attempts.

The events table is the webhook outbox: a change of status and its event commit together or not
at all, so none is missed and none is recorded twice; ``service.webhooks.delivery`` delivers the ones that
have a callback URL. The event's JSON (:func:`event_json`) is the same on every attempt, and its
``id`` is the receiver's idempotency key.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from service.core.models import (
    ClassifierStatus,
    ClassifierVersion,
    Delivery,
    StatusEvent,
    WebhookAttempt,
    timestamp,
)

STATUS_CHANGED = "classifier.status_changed"
VERSION_PROMOTED = "classifier.version_promoted"
# Each event of a classifier is created at least this long after the one before it, so that
# ordering by ``created`` (millisecond precision on the wire) is the order of the changes: a
# promote after the Available that caused it, and of two racing requests (a cancel, a resume)
# the one that took the classifier's lock second, though it read the clock first
AFTER_THE_LAST = timedelta(milliseconds=1)
LISTED_EVENTS = 100  # the newest events a listing shows


def record(
    session: Session,
    *,
    tenant_id: str,
    classifier_id: str,
    version: int | None,
    previous: str,
    status: str,
    description: str,
    callback_url: str | None,
    now: datetime,
    type: str = STATUS_CHANGED,
) -> None:
    """Add the event of a version's status change (or, with ``type``, of another change) to the
    session; the caller commits it with the change, holding the classifier's lock (so that
    ``created`` follows the classifier's last event: ``AFTER_THE_LAST``). With a ``callback_url``
    the event is pending delivery at once."""
    last = session.scalar(
        select(func.max(StatusEvent.created_at)).where(StatusEvent.classifier_id == classifier_id)
    )
    now = now if last is None else max(now, last + AFTER_THE_LAST)
    session.add(
        StatusEvent(
            tenant_id=tenant_id,
            classifier_id=classifier_id,
            version=version,
            type=type,
            status=status,
            previous_status=previous,
            description=description,
            callback_url=callback_url,
            delivery=(Delivery.PENDING if callback_url else Delivery.NONE).value,
            next_attempt_at=now if callback_url else None,
            created_at=now,
        )
    )
    _forget_unlisted(session, classifier_id)


def _forget_unlisted(session: Session, classifier_id: str) -> None:
    """Drop the classifier's events that no listing shows any more (older than its newest
    :data:`LISTED_EVENTS`) and that need no more delivery: each retrain added a few, and a
    long-lived classifier kept them all for ever, unreadable. Those still pending stay until
    delivered or given up (the next change drops them then)."""
    listed = (
        select(StatusEvent.id)
        .where(StatusEvent.classifier_id == classifier_id)
        .order_by(StatusEvent.created_at.desc(), StatusEvent.id)
        .limit(LISTED_EVENTS)
    )
    session.execute(
        delete(StatusEvent).where(
            StatusEvent.classifier_id == classifier_id,
            StatusEvent.delivery != Delivery.PENDING.value,
            StatusEvent.id.not_in(listed),
        )
    )


def record_created(
    session: Session, version: ClassifierVersion, *, callback_url: str | None, now: datetime
) -> None:
    """Add the event of a new version (a new classifier's first, or a retrain): from Non
    Existent to its first status."""
    record(
        session,
        tenant_id=version.tenant_id,
        classifier_id=version.classifier_id,
        version=version.number,
        previous=ClassifierStatus.NON_EXISTENT.value,
        status=version.status,
        description=version.status_description,
        callback_url=callback_url,
        now=now,
    )


def record_promoted(
    session: Session,
    *,
    tenant_id: str,
    classifier_id: str,
    version: int,
    replaced: int,
    callback_url: str | None,
    now: datetime,
) -> None:
    """Add the event of version ``version`` replacing version ``replaced`` as the serving one."""
    record(
        session,
        tenant_id=tenant_id,
        classifier_id=classifier_id,
        version=version,
        previous=ClassifierStatus.AVAILABLE.value,
        status=ClassifierStatus.AVAILABLE.value,
        description=f"Version {version} now serves; version {replaced} served before.",
        callback_url=callback_url,
        now=now,
        type=VERSION_PROMOTED,
    )


def record_deleted(
    session: Session,
    *,
    tenant_id: str,
    classifier_id: str,
    version: int,
    previous: str,
    description: str,
    callback_url: str | None,
    now: datetime,
) -> None:
    """Add the event of a deleted classifier or version: from its status to Non Existent."""
    record(
        session,
        tenant_id=tenant_id,
        classifier_id=classifier_id,
        version=version,
        previous=previous,
        status=ClassifierStatus.NON_EXISTENT.value,
        description=description,
        callback_url=callback_url,
        now=now,
    )


def forget_delivered(session: Session, classifier_id: str) -> None:
    """Drop the events of a deleted classifier that need no more delivery (not committed); those
    still pending stay until delivered or given up."""
    session.execute(
        delete(StatusEvent).where(
            StatusEvent.classifier_id == classifier_id, StatusEvent.delivery != Delivery.PENDING.value
        )
    )


def event_json(event: StatusEvent) -> dict[str, Any]:
    """What a receiver is sent (and what the events listing shows of the event itself)."""
    return {
        "id": event.id,
        "type": event.type,
        "created": timestamp(event.created_at),
        "classifier_id": event.classifier_id,
        "version": event.version,
        "status": event.status,
        "previous_status": event.previous_status,
        "status_description": event.description,
    }


def event_body(event: StatusEvent) -> bytes:
    """The exact bytes POSTed for ``event``: compact JSON, keys sorted, the same on every attempt."""
    return json.dumps(event_json(event), sort_keys=True, separators=(",", ":")).encode()


def recent_events(session: Session, classifier_id: str) -> list[tuple[StatusEvent, list[WebhookAttempt]]]:
    """The classifier's newest :data:`LISTED_EVENTS` status events, newest first, each with its
    delivery attempts (oldest first)."""
    events = list(
        session.scalars(
            select(StatusEvent)
            .where(StatusEvent.classifier_id == classifier_id)
            .order_by(StatusEvent.created_at.desc(), StatusEvent.id)
            .limit(LISTED_EVENTS)
        )
    )
    attempts: dict[str, list[WebhookAttempt]] = {event.id: [] for event in events}
    for attempt in session.scalars(
        select(WebhookAttempt)
        .where(WebhookAttempt.event_id.in_(list(attempts)))
        .order_by(WebhookAttempt.attempt)
    ):
        attempts[attempt.event_id].append(attempt)
    session.rollback()
    return [(event, attempts[event.id]) for event in events]
