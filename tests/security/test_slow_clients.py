"""Slow, vanishing and many clients against a real server (uvicorn on a socket): an upload that
stalls is refused once it has sent nothing for ``body_idle_seconds``, and while it stalls it
holds no database connection, so other tenants' requests are not starved of them; more
concurrent requests than the API has threads queue for the database instead of stalling it."""

from __future__ import annotations

import asyncio
import io
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import event

from service.app import create_app
from service.core.db import POOL_CONNECTIONS, POOL_TIMEOUT_S
from service.core.settings import Settings
from tests.security.conftest import serving
from tests.service.helpers import nlc_files
from trainer.bundle import write_bundle

IDLE_S = 2.0


@pytest.fixture
def server(settings_factory: Callable[..., Settings]) -> Iterator[tuple[int, FastAPI]]:
    """The API on a free local port, in a thread, with a short body idle limit."""
    with serving(create_app(settings_factory(body_idle_seconds=IDLE_S))) as served:
        yield served


@pytest.fixture
def patient_server(settings_factory: Callable[..., Settings]) -> Iterator[tuple[int, FastAPI]]:
    """The API on a free local port, in a thread, with a body idle limit past the pool's
    timeout: a stalled body is not refused before another request would have waited it out."""
    with serving(create_app(settings_factory(body_idle_seconds=POOL_TIMEOUT_S * 2))) as served:
        yield served


def _start_upload(
    port: int,
    key: str,
    path: str = "/v1/datasets",
    content_type: str = "text/csv",
    first: bytes = b"text,label\r\n",
    length: int = 1_000_000,
) -> socket.socket:
    """An upload (a dataset's, by default) that declares ``length`` bytes and sends its headers
    and ``first``, then nothing more."""
    conn = socket.create_connection(("127.0.0.1", port))
    conn.sendall(
        f"POST {path} HTTP/1.1\r\nHost: x\r\nX-API-Key: {key}\r\n".encode()
        + f"Content-Type: {content_type}\r\nContent-Length: {length}\r\n\r\n".encode()
        + first
    )
    return conn


def _status(conn: socket.socket, timeout: float) -> int:
    conn.settimeout(timeout)
    head = conn.recv(4096).split(b"\r\n", 1)[0]  # HTTP/1.1 408 Request Timeout
    return int(head.split()[1])


def _poll_when(ready: Callable[[], bool], port: int, headers: dict[str, str]) -> tuple[httpx.Response, float]:
    """Once ``ready()`` (within half the pool's timeout), a status poll with ``headers``: its
    reply and the seconds it took."""
    deadline = time.monotonic() + POOL_TIMEOUT_S / 2
    while not ready():
        assert time.monotonic() < deadline, "not ready within half the pool's timeout"
        time.sleep(0.01)
    started = time.monotonic()
    polled = httpx.get(f"http://127.0.0.1:{port}/v1/classifiers", headers=headers, timeout=POOL_TIMEOUT_S * 2)
    return polled, time.monotonic() - started


def test_a_stalled_upload_holds_no_connection_and_is_refused_after_the_idle_limit(
    server: tuple[int, FastAPI], tenant: Any, nothing_left_behind: Callable[[str], None]
) -> None:
    port, app = server
    engine = app.state.sessions.kw["bind"]
    checkouts: list[object] = []
    event.listen(engine, "checkout", lambda *_: checkouts.append(None))
    started = time.monotonic()
    uploads = [_start_upload(port, tenant.api_key) for _ in range(3)]
    try:
        # each authenticated (a checkout apiece) and streaming its body, holding no connection
        # (a pool of 5 + 10 outlasted 15 of these before); polled, as a loaded machine may
        # take a while to get the three through their key lookups
        while not (len(checkouts) >= 3 and engine.pool.checkedout() == 0):
            assert time.monotonic() - started < IDLE_S * 0.9, (len(checkouts), engine.pool.checkedout())
            time.sleep(0.01)
        statuses = [_status(conn, timeout=IDLE_S * 10) for conn in uploads]
    finally:
        for conn in uploads:
            conn.close()
    assert statuses == [408, 408, 408]
    assert time.monotonic() - started < IDLE_S * 8
    nothing_left_behind(tenant.id)


def test_a_tenants_stalled_uploads_leave_the_others_database_routes_answering(
    patient_server: tuple[int, FastAPI], tenant_factory: Callable[..., Any], client: TestClient
) -> None:
    """A request held one of the API's database slots (one per pool connection) until its
    reply, and an upload route holds its request while the body streams in: 15 uploads of one
    tenant trickling a byte a minute held every slot, and every other tenant's status poll
    waited the pool's 30 s for a 503. Every route that reads its body itself stalls here, past
    the slots there are; the other tenant's poll still answers at once."""
    port, app = patient_server
    noisy, other = tenant_factory(), tenant_factory()
    created = client.post("/v1/classifiers", headers=noisy.headers, files=nlc_files())
    assert created.status_code == 200, created.text
    versions = f"/v1/classifiers/{created.json()['classifier_id']}/versions"
    multipart = "multipart/form-data; boundary=b"
    part = b'--b\r\nContent-Disposition: form-data; name="training_data"\r\n\r\nhot,t\r\n'
    upload, json_body = 1_000_000, 1000  # a JSON body over 64 KiB is refused before it is read
    shapes: list[tuple[str, str, bytes, int]] = [
        ("/v1/datasets", "text/csv", b"text,label\r\n", upload),
        ("/v1/classifiers", multipart, part, upload),
        ("/v1/classifiers", "application/json", b'{"name": "x",', json_body),
        (versions, multipart, part, upload),
        (versions, "application/json", b'{"dataset_id":', json_body),
        ("/v1/classifiers/import", "application/gzip", b"\x1f\x8b", upload),
    ]
    engine = app.state.sessions.kw["bind"]
    checkouts: list[object] = []
    event.listen(engine, "checkout", lambda *_: checkouts.append(None))
    stalled = [
        _start_upload(port, noisy.api_key, *shapes[n % len(shapes)]) for n in range(POOL_CONNECTIONS + 3)
    ]
    try:  # once as many authenticated as there are slots
        polled, waited = _poll_when(lambda: len(checkouts) >= POOL_CONNECTIONS, port, other.headers)
    finally:
        for conn in stalled:
            conn.close()
    assert polled.status_code == 200, polled.text
    assert waited < POOL_TIMEOUT_S / 3


@pytest.mark.parametrize("kind", ["dataset", "bundle"])
def test_uploads_on_their_way_to_the_store_leave_the_others_database_routes_answering(
    server: tuple[int, FastAPI], tenant_factory: Callable[..., Any], tiny_model: Path, kind: str
) -> None:
    """An upload's checks and its copy to the store (a slow S3; here a copy held back) held the
    request's database slot: a tenant's uploads, as many as there are slots, made every other
    tenant's status poll wait the pool's 30 s for a 503. Now they give it back; every upload
    still lands once the store takes it. A dataset is checked and stored with ``put_file``, a
    bundle's model extracted, loaded and stored with ``publish``."""
    port, app = server
    noisy, other = tenant_factory(), tenant_factory()
    store, release, copying = app.state.store, threading.Event(), []
    method = {"dataset": "put_file", "bundle": "publish"}[kind]
    copy = getattr(store, method)

    def held_copy(*args: Any) -> None:
        copying.append(args)
        release.wait(POOL_TIMEOUT_S * 2)
        copy(*args)

    setattr(store, method, held_copy)
    if kind == "dataset":
        path, content_type = "/v1/datasets", "text/csv"
        body = b"text,label\r\nhot day,weather\r\ncold night,weather\r\nnice goal,sport\r\n"
    else:
        path, content_type, packed = "/v1/classifiers/import", "application/gzip", io.BytesIO()
        write_bundle(tiny_model, packed, about={"name": "imported", "language": "en"})
        body = packed.getvalue()
    with ThreadPoolExecutor(POOL_CONNECTIONS + 2) as uploaders:
        uploads = [
            uploaders.submit(
                httpx.post,
                f"http://127.0.0.1:{port}{path}",
                content=body,
                headers={**noisy.headers, "Content-Type": content_type},
                timeout=POOL_TIMEOUT_S * 3,
            )
            for _ in range(POOL_CONNECTIONS + 2)
        ]
        try:  # once as many are held in the copy as there are slots
            polled, waited = _poll_when(lambda: len(copying) >= POOL_CONNECTIONS, port, other.headers)
        finally:
            release.set()
        replies = [upload.result() for upload in uploads]
    assert polled.status_code == 200, polled.text
    assert waited < POOL_TIMEOUT_S / 3
    assert [r.status_code for r in replies] == [201] * (POOL_CONNECTIONS + 2), replies[0].text


@pytest.mark.parametrize("keyed", [False, True], ids=["no-key", "with-a-key"])
def test_a_classify_that_declares_a_body_and_sends_none_is_refused_after_the_idle_limit(
    server: tuple[int, FastAPI], tenant: Any, keyed: bool
) -> None:
    """The fast path read the body with no deadline (the key is read after it): such a request
    held its socket for as long as the client kept it open."""
    port, _ = server
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(
            b"POST /v1/classifiers/00000000-0000-0000-0000-000000000000/classify HTTP/1.1\r\nHost: x\r\n"
            + (f"X-API-Key: {tenant.api_key}\r\n".encode() if keyed else b"")
            + b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
        )
        status = _status(conn, timeout=IDLE_S * 10)

    assert status == 408
    assert time.monotonic() - started < IDLE_S * 5


def test_a_client_that_leaves_mid_body_is_not_a_server_error(
    server: tuple[int, FastAPI], tenant: Any, nothing_left_behind: Callable[[str], None]
) -> None:
    port, app = server
    _start_upload(port, tenant.api_key).close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        seen = app.state.metrics.exposition().decode()
        if 'route="/v1/datasets"' in seen:
            break
        time.sleep(0.05)
    assert 'route="/v1/datasets",status="499"' in seen
    assert 'route="/v1/datasets",status="500"' not in seen
    nothing_left_behind(tenant.id)


def test_more_concurrent_requests_than_threads_queue_instead_of_stalling(
    server: tuple[int, FastAPI], tenant: Any
) -> None:
    """Each request waited for a pool connection in one of anyio's 40 threads, while the 15
    holding one waited for a thread to serialise their replies: 60 concurrent polls froze every
    database route for the pool's 30 s timeout, then answered 503s."""
    port, _ = server

    async def poll_all() -> list[int]:
        limits = httpx.Limits(max_connections=100)
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=60
        ) as client:
            replies = await asyncio.gather(
                *(client.get("/v1/classifiers", headers=tenant.headers) for _ in range(100))
            )
        return [reply.status_code for reply in replies]

    assert asyncio.run(poll_all()) == [200] * 100
