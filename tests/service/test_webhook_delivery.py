"""One delivery attempt (``service.webhooks.delivery.deliver``) against a real local receiver, without a
broker in the loop: signed JSON, one attempt per due time whatever the number of messages,
back-off, the cap, no redirects, the SSRF check again at delivery, https to the checked address
with the URL's host verified; and the relay that sends
(and re-sends) the messages (``send_due``) on a real Redis."""

from __future__ import annotations

import gzip
import socket
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session

from service.client.webhooks import EVENT_ID_HEADER, SIGNATURE_HEADER, verify
from service.core.db import session_factory
from service.core.models import Delivery, StatusEvent, TrainingJob, utcnow
from service.core.settings import Settings
from service.training import leases
from service.training.queue import WEBHOOK_QUEUE
from service.webhooks import delivery, slots
from tests.conftest import TenantHandle, empty_redis_db, redis_test_url
from tests.webhook_receiver import issue_certificate, running_receiver

BROKER_URL = redis_test_url(10)
BACKOFF_SECONDS = 0.2
# Each attempt's deadline, lookup to reply: generous, so that a test expecting a reply gets one on
# a loaded machine (at 2 s, one attempt of a CI run came back with no status). The tests of the
# deadline itself set their own.
ATTEMPT_SECONDS = 10.0


@pytest.fixture
def broker() -> Iterator[redis.Redis]:
    """Redis db 10, emptied before and after the test."""
    with empty_redis_db(BROKER_URL) as client:
        yield client


@pytest.fixture
def settings(settings_factory: Callable[..., Settings], broker: redis.Redis) -> Settings:
    """A local receiver is allowed; fast back-off; three attempts at most; ATTEMPT_SECONDS each."""
    return settings_factory(
        redis_url=BROKER_URL,
        webhook_allow_private=True,
        webhook_backoff_seconds=BACKOFF_SECONDS,
        webhook_backoff_max_seconds=1.0,
        webhook_max_attempts=3,
        webhook_timeout_seconds=ATTEMPT_SECONDS,
    )


@pytest.fixture
def event_to(
    tenant: TenantHandle, create_classifier: Callable[..., httpx.Response], session: Session
) -> Callable[[str], StatusEvent]:
    """``event_to(url)``: create a classifier with that callback URL (``tenant``'s, or the given
    one's); its first status event."""

    def create(url: str, owner: TenantHandle = tenant) -> StatusEvent:
        reply = create_classifier(owner, metadata={"language": "en", "name": "w", "callback_url": url})
        assert reply.status_code == 200, reply.text
        session.rollback()
        return session.scalars(
            select(StatusEvent).where(StatusEvent.classifier_id == reply.json()["classifier_id"])
        ).one()

    return create


def _event(session: Session, event_id: str) -> StatusEvent:
    session.expire_all()
    found = session.get(StatusEvent, event_id)
    assert found is not None
    return found


def test_a_delivery_is_signed_json_keyed_by_the_event_id_and_happens_once(
    client: TestClient,
    tenant: TenantHandle,
    session: Session,
    settings: Settings,
    event_to: Callable[[str], StatusEvent],
) -> None:
    with running_receiver() as receiver:
        event = event_to(receiver.url)

        attempted = delivery.deliver(session, settings, event.id)
        again = delivery.deliver(session, settings, event.id)

    assert attempted == delivery.Attempted(1, 200, None, None) and again is None
    [got] = receiver.all()
    secret = client.get("/v1/webhook_secret", headers=tenant.headers).json()["secret"]
    verify(secret, got.body, got.headers[SIGNATURE_HEADER])
    assert (got.path, got.headers["Content-Type"], got.headers[EVENT_ID_HEADER]) == (
        "/hooks/taas",
        "application/json",
        event.id,
    )
    assert got.event == {
        "id": event.id,
        "type": "classifier.status_changed",
        "created": got.event["created"],
        "classifier_id": event.classifier_id,
        "version": 1,
        "status": "Training",
        "previous_status": "Non Existent",
        "status_description": event.description,
    }
    stored = _event(session, event.id)
    assert (stored.delivery, stored.attempts, stored.next_attempt_at) == (Delivery.DELIVERED, 1, None)


def test_failed_attempts_back_off_then_the_event_is_given_up_at_the_cap(
    client: TestClient,
    tenant: TenantHandle,
    session: Session,
    settings: Settings,
    event_to: Callable[[str], StatusEvent],
    wait_until: Callable[..., Any],
) -> None:
    attempts: list[delivery.Attempted] = []
    with running_receiver(answers=[503, 500, 429]) as receiver:
        event = event_to(receiver.url)
        # The first attempt and the check after it see one instant of webhooks' clock: on a loaded
        # machine the back-off's 0.2 s could pass between the two (a flake under xdist).
        frozen = utcnow()
        with pytest.MonkeyPatch.context() as clock:
            clock.setattr(delivery, "utcnow", lambda: frozen)
            attempts.append(delivery.deliver(session, settings, event.id))  # type: ignore[arg-type]
            assert delivery.deliver(session, settings, event.id) is None  # not due until the back-off
        for _ in range(2):
            attempts.append(wait_until(lambda: delivery.deliver(session, settings, event.id), timeout=5))

    assert [(a.attempt, a.status_code, a.error, a.retry_in) for a in attempts] == [
        (1, 503, "HTTP 503: not now", BACKOFF_SECONDS),
        (2, 500, "HTTP 500: not now", 2 * BACKOFF_SECONDS),
        (3, 429, "HTTP 429: not now", None),
    ]
    assert _event(session, event.id).delivery == Delivery.FAILED
    assert len({r.event["id"] for r in receiver.all()}) == 1
    listed = client.get(f"/v1/classifiers/{event.classifier_id}/events", headers=tenant.headers).json()
    [shown] = listed["status_events"]
    assert shown["delivery"] == "failed" and shown["next_attempt"] is None
    assert [(a["attempt"], a["status_code"]) for a in shown["attempts"]] == [(1, 503), (2, 500), (3, 429)]
    assert shown["attempts"][0]["next_attempt"] is not None and shown["attempts"][2]["next_attempt"] is None


def test_a_redirect_is_a_failed_attempt_and_is_not_followed(
    session: Session, settings: Settings, event_to: Callable[[str], StatusEvent]
) -> None:
    with running_receiver(answers=[302]) as receiver:
        event = event_to(receiver.url)
        attempted = delivery.deliver(session, settings, event.id)

    assert attempted is not None and (attempted.status_code, attempted.retry_in) == (302, BACKOFF_SECONDS)
    assert len(receiver.all()) == 1


def test_a_receiver_trickling_its_reply_is_cut_off_at_the_timeout(
    session: Session, settings: Settings, event_to: Callable[[str], StatusEvent]
) -> None:
    """httpx's timeout bounds each read: a byte every 0.2 s never trips it, and before the
    attempt had a deadline this reply (about 8 s) held the delivery thread to its end."""
    reply = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    listener = socket.create_server(("127.0.0.1", 0))
    sent: list[int] = []

    def trickle() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            try:
                for byte in reply:
                    connection.sendall(bytes([byte]))
                    sent.append(byte)
                    time.sleep(0.2)
            except OSError:  # the client hung up
                pass

    receiver = threading.Thread(target=trickle, daemon=True)
    receiver.start()
    with listener:
        event = event_to(f"http://127.0.0.1:{listener.getsockname()[1]}/hook")
        attempted = delivery.deliver(
            session, settings.model_copy(update={"webhook_timeout_seconds": 1.0}), event.id
        )
        receiver.join(timeout=30)

    assert attempted is not None and attempted.status_code is None
    assert attempted.error == "TimeoutError: no reply within 1 s"
    assert attempted.retry_in == BACKOFF_SECONDS
    assert 0 < len(sent) < len(reply)  # hung up on mid-reply


def _one_reply_server(
    head: bytes, body: bytes = b"", hang: float = 0.0
) -> tuple[socket.socket, threading.Thread]:
    """A listener answering one request with ``head`` then ``body``, then holding the connection
    ``hang`` seconds."""
    listener = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            try:
                connection.sendall(head + body)
                time.sleep(hang)
            except OSError:
                pass

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    return listener, thread


def test_a_2xx_is_a_delivery_however_slowly_its_body_comes(
    session: Session, settings: Settings, event_to: Callable[[str], StatusEvent]
) -> None:
    """The reply's body was read for every status: a 200 whose body never came was recorded as
    "no reply within the timeout", four times, and the event given up."""
    hang = 2 * settings.webhook_timeout_seconds  # a read of the body would time out
    listener, thread = _one_reply_server(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", hang=hang)
    with listener:
        event = event_to(f"http://127.0.0.1:{listener.getsockname()[1]}/hook")
        started = time.monotonic()
        attempted = delivery.deliver(session, settings, event.id)

    assert attempted == delivery.Attempted(1, 200, None, None)
    assert time.monotonic() - started < settings.webhook_timeout_seconds
    assert _event(session, event.id).delivery == Delivery.DELIVERED


def test_a_compressed_refusal_is_kept_as_sent_not_inflated(
    session: Session, settings: Settings, event_to: Callable[[str], StatusEvent]
) -> None:
    """httpx inflated each chunk whole: 1.8 KB of a twice gzipped reply took the shared webhook
    worker to 2.4 GB. Here 64 MiB of zeros, gzipped twice (some 2 KB)."""
    bomb = gzip.compress(gzip.compress(bytes(64 << 20)))
    head = (
        b"HTTP/1.1 500 Internal Server Error\r\nContent-Encoding: gzip, gzip\r\n"
        + f"Content-Length: {len(bomb)}\r\n\r\n".encode()
    )
    listener, thread = _one_reply_server(head, bomb)
    with listener:
        event = event_to(f"http://127.0.0.1:{listener.getsockname()[1]}/hook")
        tracemalloc.start()
        try:  # tracemalloc slows every allocation: on a loaded machine this took over 2 s
            patient = settings.model_copy(update={"webhook_timeout_seconds": 30.0})
            attempted = delivery.deliver(session, patient, event.id)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    assert attempted is not None and attempted.status_code == 500
    assert attempted.error is not None and attempted.error.startswith("HTTP 500: ")
    assert peak < 16 << 20


def test_a_host_written_in_other_characters_is_sent_as_ascii(
    session: Session, settings: Settings, event_to: Callable[[str], StatusEvent]
) -> None:
    """A callback URL's Unicode host (full-width digits here) went into the Host header as it
    was: every attempt raised UnicodeEncodeError, none was recorded, and the event was retried
    for ever past the cap."""
    with running_receiver() as receiver:
        port = receiver.url.split(":")[2].split("/")[0]
        event = event_to(f"http://１２７.０.０.１:{port}/hooks/taas")

        attempted = delivery.deliver(session, settings, event.id)

    assert attempted == delivery.Attempted(1, 200, None, None)
    [got] = receiver.all()
    assert got.headers["Host"] == f"127.0.0.1:{port}"


def test_an_event_due_at_the_cap_is_given_up_without_an_attempt(
    session: Session, settings: Settings, event_to: Callable[[str], StatusEvent]
) -> None:
    """Its last attempt was claimed but never recorded: each sweep claimed it once more."""
    with running_receiver() as receiver:
        event = event_to(receiver.url)
        session.execute(
            update(StatusEvent)
            .where(StatusEvent.id == event.id)
            .values(attempts=settings.webhook_max_attempts)
        )
        session.commit()

        assert delivery.deliver(session, settings, event.id) is None

    assert receiver.all() == []
    stored = _event(session, event.id)
    assert (stored.delivery, stored.attempts) == (Delivery.FAILED, settings.webhook_max_attempts)


def test_the_last_event_of_a_deleted_classifier_goes_once_delivered(
    client: TestClient,
    tenant: TenantHandle,
    session: Session,
    settings: Settings,
    event_to: Callable[[str], StatusEvent],
) -> None:
    """Delivered or given up, nothing can read it (the classifier's events listing is a 404):
    such events stayed in the table for ever."""
    with running_receiver() as receiver:
        event = event_to(receiver.url)
        assert client.delete(f"/v1/classifiers/{event.classifier_id}", headers=tenant.headers).is_success
        session.rollback()
        pending = session.scalars(
            select(StatusEvent.id).where(StatusEvent.classifier_id == event.classifier_id)
        ).all()

        for event_id in pending:
            assert delivery.deliver(session, settings, event_id) is not None

    assert len(receiver.all()) == 2
    session.rollback()
    assert (
        session.scalars(select(StatusEvent).where(StatusEvent.classifier_id == event.classifier_id)).all()
        == []
    )


def test_a_long_run_of_put_offs_waits_at_most_the_timeout(session: Session, settings: Settings) -> None:
    """0.25 s x 2**1024 overflowed a float: the message was dropped with a traceback."""
    assert delivery._put_off(session, settings, "no-such-event", "no-such-tenant", utcnow(), 1024) is None


def test_a_tenant_with_a_backlog_has_its_waiting_events_come_round_less_often(
    session: Session, settings: Settings, event_to: Callable[[str], StatusEvent], tenant: TenantHandle
) -> None:
    """Put off for one attempt's longest at most, a tenant's 1,450 waiting events kept the webhook
    worker at 94 % CPU, and another tenant's deliveries 12 s late."""
    events = [event_to("http://127.0.0.1:9/hook") for _ in range(5)]  # four others ahead of the last

    waits = [
        delivery._put_off(session, settings, events[-1].id, tenant.id, utcnow() + timedelta(hours=hours), 40)
        for hours in range(1, 21)  # each one later than the last put-off's due time
    ]

    timeout = settings.webhook_timeout_seconds
    assert all(
        isinstance(w, delivery.Busy) and 0.5 * 4 * timeout <= w.retry_in <= 1.5 * 4 * timeout for w in waits
    )


def test_a_callback_host_whose_lookup_hangs_is_cut_off_at_the_timeout(
    session: Session,
    settings: Settings,
    event_to: Callable[[str], StatusEvent],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The name servers of a tenant's host may never answer; the attempt still ends on time."""
    looked_up = threading.Event()
    resolve = socket.getaddrinfo

    def name_servers_that_do_not_answer(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host != "hangs.example":
            return resolve(host, *args, **kwargs)
        time.sleep(3)
        looked_up.set()
        raise socket.gaierror("timed out")

    event = event_to("http://127.0.0.1:9/hook")
    session.execute(
        update(StatusEvent).where(StatusEvent.id == event.id).values(callback_url="http://hangs.example/hook")
    )
    session.commit()
    monkeypatch.setattr(socket, "getaddrinfo", name_servers_that_do_not_answer)

    attempted = delivery.deliver(
        session, settings.model_copy(update={"webhook_timeout_seconds": 1.0}), event.id
    )

    assert not looked_up.is_set()  # the attempt did not wait for the lookup
    assert attempted is not None and not isinstance(attempted, delivery.Busy)
    assert attempted.error == (
        "refused: callback_url host 'hangs.example' could not be looked up: took longer than 1 s"
    )


def test_an_address_that_takes_no_connection_gives_way_to_the_next_checked_one(
    session: Session,
    settings: Settings,
    event_to: Callable[[str], StatusEvent],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only a host's first address was tried: one whose IPv6 address is listed first and takes no
    connection never got an event."""
    with running_receiver() as receiver:
        port = receiver.server.server_address[1]
        event = event_to(receiver.url)
        session.execute(
            update(StatusEvent)
            .where(StatusEvent.id == event.id)
            .values(callback_url=f"http://two.example:{port}/hooks/taas")
        )
        session.commit()
        resolve = socket.getaddrinfo

        def two_addresses(host: Any, *args: Any, **kwargs: Any) -> Any:
            if host != "two.example":
                return resolve(host, *args, **kwargs)
            return [
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in ("127.0.0.2", "127.0.0.1")
            ]

        monkeypatch.setattr(socket, "getaddrinfo", two_addresses)

        attempted = delivery.deliver(session, settings, event.id)

    assert attempted == delivery.Attempted(1, 200, None, None)
    assert [got.headers["Host"] for got in receiver.all()] == [f"two.example:{port}"]


def test_a_tenants_attempt_in_flight_puts_off_its_next_event_and_no_other_tenants(
    session: Session,
    engine: Engine,
    settings: Settings,
    event_to: Callable[..., StatusEvent],
    tenant_factory: Callable[..., TenantHandle],
    wait_until: Callable[..., Any],
) -> None:
    """webhook_tenant_concurrency = 1: while tenant A's receiver holds an attempt, A's next event
    is put off (no attempt spent) and tenant B's is delivered; A's goes once the slot is free."""
    entered, release = threading.Event(), threading.Event()

    def first_one_hangs() -> None:
        if not entered.is_set():
            entered.set()
            release.wait(timeout=30)

    with running_receiver(on_request=first_one_hangs) as receiver:
        held, waiting = event_to(receiver.url), event_to(receiver.url)
        other = event_to(receiver.url, tenant_factory("other"))
        results: list[Any] = []

        def deliver_held() -> None:
            with session_factory(engine)() as own:
                results.append(delivery.deliver(own, settings, held.id))

        attempt = threading.Thread(target=deliver_held)
        attempt.start()
        assert entered.wait(timeout=10)

        before = utcnow()
        put_off = delivery.deliver(session, settings, waiting.id)
        assert isinstance(put_off, delivery.Busy)
        assert 0.5 * 0.25 <= put_off.retry_in <= 1.5 * 0.25  # the first put-off's, jittered
        assert _event(session, waiting.id).attempts == 0
        assert _event(session, waiting.id).next_attempt_at >= before + timedelta(seconds=put_off.retry_in)

        delivered = delivery.deliver(session, settings, other.id)
        assert delivered is not None and not isinstance(delivered, delivery.Busy)
        assert delivered.error is None

        time.sleep(put_off.retry_in)
        again = delivery.deliver(session, settings, waiting.id, put_offs=10)
        assert isinstance(again, delivery.Busy)
        timeout = settings.webhook_timeout_seconds
        assert 0.5 * timeout <= again.retry_in <= 1.5 * timeout  # doubled up to the timeout

        release.set()
        attempt.join(timeout=30)
        assert results[0].error is None
        session.execute(  # the put-off's wait, passed
            update(StatusEvent).where(StatusEvent.id == waiting.id).values(next_attempt_at=utcnow())
        )
        session.commit()
        later = delivery.deliver(session, settings, waiting.id)

    assert not isinstance(later, delivery.Busy) and later.error is None
    assert [r.event["id"] for r in receiver.accepted()] == [other.id, held.id, waiting.id]


def test_slots_are_per_tenant_a_duplicate_message_takes_none_and_a_dead_holders_lapse(
    broker: redis.Redis,
) -> None:
    def slot(tenant: str, event: str) -> Any:
        return slots.slot(BROKER_URL, tenant, event, per_tenant=2, hold_seconds=15.0)

    with slot("a", "e1") as first, slot("a", "e2") as second:
        with slot("a", "e1") as duplicate, slot("a", "e3") as third, slot("b", "e4") as other_tenant:
            assert (first, second, duplicate, third, other_tenant) == (True, True, None, False, True)
        with slot("a", "e3") as still_full:  # the duplicate's exit gave back nothing
            assert still_full is False
    broker.zadd("taas:webhook-slots:a", {"killed-mid-attempt": 0})  # lapsed long ago
    with slot("a", "e6") as after_a_crash:
        assert after_a_crash is True


def test_the_address_is_checked_again_at_delivery(
    session: Session, settings: Settings, event_to: Callable[[str], StatusEvent]
) -> None:
    with running_receiver() as receiver:
        event = event_to(receiver.url)  # accepted while the installation allowed private receivers
        strict = settings.model_copy(update={"webhook_allow_private": False})
        attempted = delivery.deliver(session, strict, event.id)

    assert attempted is not None and attempted.status_code is None
    assert attempted.error == (
        "refused: callback_url host '127.0.0.1' resolves to 127.0.0.1, a loopback address "
        "(taas calls only public addresses)"
    )
    assert receiver.all() == []


def test_a_classifier_deleted_during_an_attempt_keeps_its_undelivered_events(
    client: TestClient,
    tenant: TenantHandle,
    session: Session,
    settings: Settings,
    event_to: Callable[[str], StatusEvent],
) -> None:
    """Its events outlive it until delivered: the attempt under way is recorded and retried, and
    the deletion's own event (to Non Existent) follows it to the same receiver."""
    classifier_id: list[str] = []

    def delete_it() -> None:
        assert client.delete(f"/v1/classifiers/{classifier_id[0]}", headers=tenant.headers).status_code == 200

    with running_receiver(answers=[503], on_request=delete_it) as receiver:
        event = event_to(receiver.url)
        classifier_id.append(event.classifier_id)

        attempted = delivery.deliver(session, settings, event.id)

    assert attempted is not None and (attempted.attempt, attempted.status_code) == (1, 503)
    assert len(receiver.all()) == 1
    session.rollback()
    left = session.scalars(
        select(StatusEvent)
        .where(StatusEvent.classifier_id == event.classifier_id)
        .order_by(StatusEvent.created_at)
    ).all()
    assert [(e.id == event.id, e.status, e.delivery) for e in left] == [
        (True, "Training", Delivery.PENDING),
        (False, "Non Existent", Delivery.PENDING),
    ]


def test_two_messages_for_one_event_at_once_make_one_attempt(
    session: Session, settings: Settings, event_to: Callable[[str], StatusEvent], engine: Any
) -> None:
    results: list[delivery.Attempted | None] = []
    with running_receiver() as receiver:
        event = event_to(receiver.url)

        def run() -> None:
            with session_factory(engine)() as own:
                results.append(delivery.deliver(own, settings, event.id))

        threads = [threading.Thread(target=run) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)

    assert sorted(results, key=lambda r: r is None) == [delivery.Attempted(1, 200, None, None), None]
    assert len(receiver.all()) == 1


def test_the_relay_sends_unsent_events_and_resends_only_overdue_ones(
    session: Session,
    settings: Settings,
    broker: redis.Redis,
    event_to: Callable[[str], StatusEvent],
) -> None:
    # The database serves the whole run: settle the pending events earlier tests left (a
    # deleted classifier's stay pending), which this unscoped sweep would otherwise pick up
    # once they are overdue, i.e. on a run slow enough to leave webhook_resend_grace_seconds
    # between that test and this one.
    session.execute(
        update(StatusEvent)
        .where(StatusEvent.delivery == Delivery.PENDING.value)
        .values(delivery=Delivery.FAILED.value)
    )
    session.commit()
    event = event_to("http://93.184.216.34/hook")  # the API sent its message after the commit
    assert broker.llen(WEBHOOK_QUEUE) == 1
    assert delivery.send_due(session, settings) == []  # sent just now: not overdue
    job = session.scalars(select(TrainingJob).where(TrainingJob.classifier_id == event.classifier_id)).one()
    lease = leases.claim_job(session, job.id, "w", now=utcnow(), lease=timedelta(seconds=60))
    assert lease is not None
    assert leases.finish_job(session, lease, model_dir="m", metrics={}, now=utcnow())  # a worker's commit
    finished = session.scalars(
        select(StatusEvent).where(
            StatusEvent.classifier_id == event.classifier_id, StatusEvent.id != event.id
        )
    ).one()

    assert delivery.send_due(session, settings) == [finished.id]
    assert delivery.send_due(session, settings) == []
    hour_ago = utcnow() - timedelta(hours=1)
    session.execute(  # as if both messages had been lost with Redis an hour ago
        update(StatusEvent)
        .where(StatusEvent.classifier_id == event.classifier_id)
        .values(enqueued_at=hour_ago, next_attempt_at=hour_ago)
    )
    session.commit()
    assert sorted(delivery.send_due(session, settings)) == sorted([event.id, finished.id])
    assert broker.llen(WEBHOOK_QUEUE) == 4


def test_a_receiver_that_is_down_gets_the_event_once_it_is_back(
    session: Session,
    settings: Settings,
    event_to: Callable[[str], StatusEvent],
    wait_until: Callable[..., Any],
) -> None:
    with running_receiver(answers=[503, 503]) as receiver:
        event = event_to(receiver.url)

        def delivered() -> bool:
            attempted = delivery.deliver(session, settings, event.id)
            return attempted is not None and attempted.error is None

        wait_until(delivered, timeout=10)

    assert [r.answered for r in receiver.all()] == [503, 503, 200]
    assert [r.event["id"] for r in receiver.accepted()] == [event.id]


@pytest.mark.parametrize("certified_for", ["localhost", "other.example"])
def test_https_goes_to_the_checked_address_and_verifies_the_urls_host(
    certified_for: str,
    settings_factory: Callable[..., Settings],
    broker: redis.Redis,
    event_to: Callable[[str], StatusEvent],
    session: Session,
    tmp_path: Path,
) -> None:
    """The connection is pinned to the address the SSRF check resolved, and TLS still checks
    the certificate against the URL's host name, sent as SNI: a certificate for another name
    fails the attempt, however the address answers."""
    ca_file, tls = issue_certificate(tmp_path, certified_for)
    settings = settings_factory(
        redis_url=BROKER_URL,
        webhook_allow_private=True,
        webhook_ca_file=ca_file,
        webhook_timeout_seconds=ATTEMPT_SECONDS,
    )
    with running_receiver(tls=tls) as receiver:
        event = event_to(receiver.url)

        attempted = delivery.deliver(session, settings, event.id)

    assert attempted is not None
    assert receiver.server_names[:1] == ["localhost"]
    if certified_for == "localhost":
        assert (attempted.status_code, attempted.error) == (200, None)
        [got] = receiver.all()
        assert got.headers["Host"] == receiver.url.split("/")[2]  # localhost:<port>, not the address
        assert _event(session, event.id).delivery == Delivery.DELIVERED
    else:
        assert attempted.status_code is None and attempted.error is not None
        assert "certificate verify failed" in attempted.error.lower(), attempted.error
        assert receiver.all() == []
        assert _event(session, event.id).delivery == Delivery.PENDING
