"""Status webhooks: POST each status event to its callback URL, signed with the tenant's secret,
retried with back-off up to a cap, every attempt recorded.

Delivery is at least once: the event row is the truth and a queue message only wakes the webhook
worker (``workers.webhook_worker``), exactly as for training jobs. :func:`send_due` is the relay that
sends a message for each pending event that has none (new, or its message lost with Redis); the
API calls it after its own commits, the webhook worker's sweep for everyone else's. An attempt
(:func:`deliver`) begins with a compare-and-set that takes the event's next attempt, so two
messages for one event make one attempt. Receivers dedupe on the event's ``id`` (also sent as
``X-Taas-Event-Id``), which makes delivery exactly once where it counts.

One tenant's slow receiver delays only that tenant: an attempt ends within
``webhook_timeout_seconds``, reply included, and a tenant has at most
``webhook_tenant_concurrency`` attempts in flight (``service.webhooks.slots``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import ssl
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import ColumnElement, Update, and_, delete, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.client.webhooks import EVENT_ID_HEADER, SIGNATURE_HEADER, sign
from service.core.errors import NotFound
from service.core.models import (
    Classifier,
    Delivery,
    StatusEvent,
    WebhookAttempt,
    utcnow,
)
from service.core.sealing import SealingError, key_ring
from service.core.settings import Settings
from service.training.jobs import BackOff
from service.training.queue import enqueue_webhook
from service.training.status_events import event_body
from service.webhooks import secrets, slots
from service.webhooks.callback_urls import Destination, UnsafeCallback, check_callback_url

log = logging.getLogger(__name__)
USER_AGENT = "taas-webhooks/1"
_EXCERPT_CHARS = 200  # of a refusing receiver's reply, kept with the attempt
_SEND_BATCH = 500  # messages one relay pass sends at most
_LEASE_MARGIN_SECONDS = 5.0
_FIRST_PUT_OFF_SECONDS = 0.25
_NO_SECRET = "not sent: the webhook secret cannot be read here (the operator's secrets key; see the log)"


@dataclass(frozen=True)
class Attempted:
    """What one delivery attempt did; ``retry_in`` is the wait before the next one (None when
    the event was delivered or given up)."""

    attempt: int
    status_code: int | None
    error: str | None
    retry_in: float | None


@dataclass(frozen=True)
class Busy:
    """The event's tenant has ``webhook_tenant_concurrency`` attempts in flight: this event's is
    put off by ``retry_in`` seconds, no attempt spent (``service.webhooks.slots``)."""

    retry_in: float


def deliver(
    session: Session, settings: Settings, event_id: str, *, put_offs: int = 0
) -> Attempted | Busy | None:
    """Make the event's next delivery attempt, if one is due and its tenant has a slot free
    (``put_offs``: how many times in a row this message has been put off for want of one).

    None when there is nothing to do: the event is delivered, given up or gone, its next attempt
    is not due yet, or another message's attempt is running (the claim holds the event for the
    attempt's longest possible duration, after which the relay treats it as lost).
    """
    started = utcnow()
    tenant_id = session.scalar(select(StatusEvent.tenant_id).where(StatusEvent.id == event_id, _due(started)))
    session.rollback()
    if tenant_id is None:
        return None
    hold = timedelta(seconds=2 * settings.webhook_timeout_seconds + _LEASE_MARGIN_SECONDS)
    with slots.slot(
        settings.require_redis_url(),
        tenant_id,
        event_id,
        per_tenant=settings.webhook_tenant_concurrency,
        hold_seconds=hold.total_seconds(),
    ) as free:
        if free is None:  # another message for the event is making its attempt
            return None
        if not free:
            return _put_off(session, settings, event_id, tenant_id, started, put_offs)
        return _attempt(session, settings, event_id, started, hold)


def _due(now: datetime) -> ColumnElement[bool]:
    return and_(StatusEvent.delivery == Delivery.PENDING.value, StatusEvent.next_attempt_at <= now)


def _attempt(
    session: Session, settings: Settings, event_id: str, started: datetime, hold: timedelta
) -> Attempted | None:
    claimed = session.execute(
        _update_event(event_id, _due(started), StatusEvent.attempts < settings.webhook_max_attempts)
        .values(attempts=StatusEvent.attempts + 1, next_attempt_at=started + hold)
        .returning(StatusEvent.attempts)
    ).one_or_none()
    if claimed is None:
        # due and at the cap: its last attempt was claimed but never recorded (a crash); given up
        # here, where it was retried for ever past the cap
        session.execute(
            _update_event(
                event_id, _due(started), StatusEvent.attempts >= settings.webhook_max_attempts
            ).values(delivery=Delivery.FAILED.value, next_attempt_at=None)
        )
        session.commit()
        return None
    session.commit()
    event = session.get(StatusEvent, event_id)
    secret: str | None = None
    try:
        if event is not None:
            secret = secrets.current_secret(session, key_ring(settings), event.tenant_id)
    except NotFound:  # the tenant, and with it the event, was deleted
        pass
    except SealingError as problem:  # the operator's key is missing or not the API's
        log.error("event %s: the tenant's webhook secret cannot be read: %s", event_id, problem)
        return _record(session, settings, event_id, claimed.attempts, started, None, _NO_SECRET)
    session.commit()  # hold no transaction open across the HTTP call
    if event is None or secret is None:
        return None
    status_code, error = _post(event, secret, settings)
    return _record(session, settings, event_id, claimed.attempts, started, status_code, error)


def _put_off(
    session: Session, settings: Settings, event_id: str, tenant_id: str, now: datetime, put_offs: int
) -> Busy | None:
    """Make the event due again a little later, its message in hand (the relay must not send it
    another). The wait starts at a quarter of a second, as a healthy receiver's attempt is over
    by then, and doubles with each put-off up to what the tenant's other pending events take,
    ``webhook_tenant_concurrency`` at a time, at most ``webhook_timeout_seconds`` each (and at
    least one attempt's longest); jittered, so a tenant's waiting events do not all come back
    at once. A ceiling of one attempt's longest whatever the backlog had a tenant's 1,450
    waiting events come round every few seconds each, the webhook worker busy with them at
    94 % CPU and every other tenant's deliveries 12 s late. None if it is no longer due
    (delivered meanwhile)."""
    others = session.scalar(
        select(func.count()).where(
            StatusEvent.tenant_id == tenant_id,
            StatusEvent.delivery == Delivery.PENDING.value,
            StatusEvent.id != event_id,
        )
    )
    timeout = settings.webhook_timeout_seconds
    ceiling = timeout * max(1.0, (others or 0) / settings.webhook_tenant_concurrency)
    doubled = _FIRST_PUT_OFF_SECONDS * 2 ** min(put_offs, 32)  # 2**1024 overflowed a float
    wait = min(ceiling, doubled) * random.uniform(0.5, 1.5)
    result = session.execute(
        _update_event(event_id, _due(now)).values(
            next_attempt_at=now + timedelta(seconds=wait), enqueued_at=now
        )
    )
    session.commit()
    return Busy(wait) if result.rowcount == 1 else None  # type: ignore[attr-defined]


def send_due(session: Session, settings: Settings, *, classifier_id: str | None = None) -> list[str]:
    """Send a delivery message for each pending event (of ``classifier_id``, or all) that needs
    one: never sent, or overdue by ``webhook_resend_grace_seconds`` since both its due time and
    its last message (lost with Redis, or its worker died mid-attempt). Returns their ids.

    Raises RuntimeError without a broker, kombu's OperationalError when it is unreachable.
    """
    now = utcnow()
    overdue = now - timedelta(seconds=settings.webhook_resend_grace_seconds)
    query = select(StatusEvent.id).where(
        StatusEvent.delivery == Delivery.PENDING.value,
        or_(
            StatusEvent.enqueued_at.is_(None),
            and_(StatusEvent.next_attempt_at <= overdue, StatusEvent.enqueued_at <= overdue),
        ),
    )
    if classifier_id is not None:
        query = query.where(StatusEvent.classifier_id == classifier_id)
    due = list(session.scalars(query.order_by(StatusEvent.created_at).limit(_SEND_BATCH)))
    session.rollback()
    for event_id in due:
        enqueue_webhook(settings, event_id)
        session.execute(_update_event(event_id).values(enqueued_at=now))
        session.commit()
    return due


def send_new_events(session: Session, settings: Settings, classifier_id: str) -> None:
    """After the API committed a status change: send its event's message now. A failure is
    logged, never raised: the webhook worker's sweep sends the event instead."""
    try:
        send_due(session, settings, classifier_id=classifier_id)
    except Exception:
        session.rollback()
        log.exception("could not send the status events of %s; the sweep will", classifier_id)


def _post(event: StatusEvent, secret: str, settings: Settings) -> tuple[int | None, str | None]:
    """POST the event; its HTTP status, and why the attempt failed (None when it succeeded)."""
    body = event_body(event)
    signature = sign(secret, body, int(time.time()))
    started = time.monotonic()
    try:
        target = check_callback_url(
            event.callback_url or "",
            allow_private=settings.webhook_allow_private,
            tenant_id=event.tenant_id,
            timeout=settings.webhook_timeout_seconds,
        )
        left = settings.webhook_timeout_seconds - (time.monotonic() - started)
        status_code, excerpt = asyncio.run(_send(target, event, body, signature, settings, left))
    except UnsafeCallback as refused:
        return None, f"refused: callback_url {refused}"
    except TimeoutError:
        return None, f"TimeoutError: no reply within {settings.webhook_timeout_seconds:g} s"
    except Exception as error:  # httpx's errors, and any other: an attempt, recorded and counted
        if not isinstance(error, httpx.HTTPError):
            log.exception("event %s: the attempt failed unexpectedly", event.id)
        return None, f"{type(error).__name__}: {error}"[:_EXCERPT_CHARS]
    if 200 <= status_code < 300:
        return status_code, None
    return status_code, f"HTTP {status_code}: {excerpt}"


async def _send(
    target: Destination, event: StatusEvent, body: bytes, signature: str, settings: Settings, seconds: float
) -> tuple[int, str]:
    """POST to the checked ``target`` and read the start of the reply, all within ``seconds``
    (else TimeoutError), what the attempt has left of ``webhook_timeout_seconds`` after the
    lookup. httpx's timeouts bound each read, not the reply: a receiver sending its headers a
    byte every 0.5 s held a delivery thread 18.7 s at a 1 s timeout, and could hold one for as
    long as it liked while its events waited out their claims and were sent again. The checked
    addresses are tried in turn while none takes the connection."""
    async with asyncio.timeout(seconds):
        headers = {
            "Host": target.host,
            "Accept-Encoding": "identity",
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            EVENT_ID_HEADER: event.id,
            SIGNATURE_HEADER: signature,
        }
        extensions = {"sni_hostname": target.server_name} if target.server_name else {}
        # trust_env=False: no proxy from the environment, which would connect elsewhere.
        async with httpx.AsyncClient(
            timeout=settings.webhook_timeout_seconds,
            follow_redirects=False,
            trust_env=False,
            verify=_trusted(settings.webhook_ca_file),
        ) as client:
            *others, last = target.urls
            for url in others:
                try:
                    return await _post_to(client, url, body, headers, extensions)
                except httpx.ConnectError:
                    continue  # the next address
            return await _post_to(client, last, body, headers, extensions)


async def _post_to(
    client: httpx.AsyncClient, url: str, body: bytes, headers: dict[str, str], extensions: dict[str, Any]
) -> tuple[int, str]:
    """POST ``body`` to ``url``: the status, and the start of the reply unless it is a 2xx."""
    request = client.build_request("POST", url, content=body, headers=headers, extensions=extensions)
    response = await client.send(request, stream=True)
    try:
        if 200 <= response.status_code < 300:  # delivered; its body is never read
            return response.status_code, ""
        return response.status_code, await _excerpt(response)
    finally:
        await response.aclose()


@functools.lru_cache(maxsize=4)
def _trusted(ca_file: Path | None) -> ssl.SSLContext | bool:
    """What https receivers' certificates are checked against: the operator's CA file, else
    httpx's default (the certifi bundle). The connection goes to the checked address and TLS
    verifies the URL's host name (sent as SNI) against the certificate."""
    return True if ca_file is None else ssl.create_default_context(cafile=str(ca_file))


async def _excerpt(response: httpx.Response) -> str:
    """The start of the reply, read no further than needed, as sent: not decompressed (the
    request asks for none), since httpx inflates each chunk whole, and 1.8 KB of a twice
    gzipped reply took the webhook worker to 2.4 GB."""
    data = b""
    async for chunk in response.aiter_raw():
        data += chunk
        if len(data) >= _EXCERPT_CHARS:
            break
    text = data.decode("utf-8", "replace")[:_EXCERPT_CHARS]
    # unprintable characters shown as U+FFFD: PostgreSQL refuses a NUL in text, and the failed
    # write lost the attempt (a binary or compressed refusal)
    return "".join(ch if ch.isprintable() or ch in "\t\n" else "\ufffd" for ch in text)


def _record(
    session: Session,
    settings: Settings,
    event_id: str,
    attempt: int,
    started: datetime,
    status_code: int | None,
    error: str | None,
) -> Attempted | None:
    """Store the attempt and the event's next state: delivered, due again after the back-off, or
    given up at ``webhook_max_attempts``. None when the event was deleted meanwhile."""
    now = utcnow()
    retry_in: float | None = None
    state: dict[str, Any]
    if error is None:
        state = {"delivery": Delivery.DELIVERED.value, "delivered_at": now, "next_attempt_at": None}
    elif attempt >= settings.webhook_max_attempts:
        state = {"delivery": Delivery.FAILED.value, "next_attempt_at": None}
    else:
        wait = BackOff(settings.webhook_backoff_seconds, settings.webhook_backoff_max_seconds).delay(attempt)
        retry_in = wait.total_seconds()
        state = {"next_attempt_at": now + wait, "enqueued_at": now}  # the caller sends the retry
    # Fenced by the attempt number: an attempt presumed lost, and superseded, changes nothing.
    result = session.execute(_update_event(event_id, StatusEvent.attempts == attempt).values(**state))
    current = bool(result.rowcount == 1)  # type: ignore[attr-defined]
    session.add(
        WebhookAttempt(
            event_id=event_id,
            attempt=attempt,
            at=started,
            status_code=status_code,
            error=error,
            next_attempt_at=state["next_attempt_at"],
        )
    )
    if current and state["next_attempt_at"] is None:  # delivered or given up: done with it
        # the last of a deleted classifier goes (status_events.forget_delivered dropped its others
        # at the deletion); such events stayed for ever, and nothing can read them
        session.execute(
            delete(StatusEvent).where(
                StatusEvent.id == event_id,
                ~select(Classifier.id).where(Classifier.id == StatusEvent.classifier_id).exists(),
            )
        )
    try:
        session.commit()
    except IntegrityError:  # the classifier, and with it the event, was deleted
        session.rollback()
        return None
    return Attempted(attempt, status_code, error, retry_in if current else None)


def _update_event(event_id: str, *conditions: ColumnElement[bool]) -> Update:
    return (
        update(StatusEvent)
        .where(StatusEvent.id == event_id, *conditions)
        .execution_options(synchronize_session=False)
    )
