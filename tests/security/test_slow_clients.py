"""Slow, vanishing and many clients against a real server (uvicorn on a socket): an upload that
stalls is refused once it has sent nothing for ``body_idle_seconds``, and while it stalls it
holds no database connection, so other tenants' requests are not starved of them; more
concurrent requests than the API has threads queue for the database instead of stalling it."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from sqlalchemy import event

from service.app import create_app
from service.settings import Settings

IDLE_S = 2.0


@pytest.fixture
def server(settings_factory: Callable[..., Settings]) -> Iterator[tuple[int, FastAPI]]:
    """The API on a free local port, in a thread, with a short body idle limit."""
    app = create_app(settings_factory(body_idle_seconds=IDLE_S))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    running = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not running.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.02)
    yield port, app
    running.should_exit = True
    thread.join(timeout=30)


def _start_upload(port: int, key: str) -> socket.socket:
    """A dataset upload that sends its headers and a first line, then nothing more."""
    conn = socket.create_connection(("127.0.0.1", port))
    conn.sendall(
        b"POST /v1/datasets HTTP/1.1\r\nHost: x\r\n"
        + f"X-API-Key: {key}\r\n".encode()
        + b"Content-Type: text/csv\r\nContent-Length: 1000000\r\n\r\ntext,label\r\n"
    )
    return conn


def _status(conn: socket.socket, timeout: float) -> int:
    conn.settimeout(timeout)
    head = conn.recv(4096).split(b"\r\n", 1)[0]  # HTTP/1.1 408 Request Timeout
    return int(head.split()[1])


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
