"""What a request stages in the store's staging folder is the request's own: gone when the
request ends, whatever its reply did (sent whole, refused for its ``Range``, cut off by the
client), and counted against the tenant's ``dataset_bytes`` quota while it exists.

Before, an export's bundle was removed by a background task that Starlette runs only after a
reply it sent whole: every refused range or abandoned download left a whole bundle behind until
the hourly sweep, and a tenant looping on them filled the disk every tenant's uploads share."""

from __future__ import annotations

import gzip
import logging
import os
import shutil
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from service.app import create_app
from service.core.settings import Settings
from service.storage.store import ArtifactStore
from tests.security.conftest import Estate, serving
from tests.service.helpers import make_available, nlc_files
from trainer.inference import WEIGHTS_FILE

pytestmark = pytest.mark.dialect_neutral

BUNDLE_ROUTES = {
    "serving": "/v1/classifiers/{cid}/bundle",
    "version": "/v1/classifiers/{cid}/versions/1/bundle",
}


def _staged(settings: Settings) -> list[Path]:
    staging = settings.resolved_artifacts_dir() / "tmp"
    return sorted(staging.iterdir()) if staging.exists() else []


def _set_quota(client: TestClient, admin_headers: dict[str, str], tenant_id: str, **quotas: int) -> None:
    reply = client.patch(f"/v1/admin/tenants/{tenant_id}/quotas", json=quotas, headers=admin_headers)
    assert reply.status_code == 200, reply.text


def _stored_bytes(client: TestClient, admin_headers: dict[str, str], tenant_id: str) -> int:
    reply = client.get(f"/v1/admin/tenants/{tenant_id}/quotas", headers=admin_headers)
    return int(reply.json()["usage"]["dataset_bytes"])


@pytest.fixture
def heavy(
    client: TestClient,
    tenant_factory: Callable[..., Any],
    session: Session,
    store: ArtifactStore,
    tiny_model: Path,
    tmp_path: Path,
) -> tuple[Any, str]:
    """A tenant and its Available classifier whose bundle is 8 MiB of incompressible weights:
    more than the sockets between a server and a client that stops reading can hold, so that
    its download stays in flight."""
    model = tmp_path / "heavy-model"
    shutil.copytree(tiny_model, model)
    (model / WEIGHTS_FILE).write_bytes(os.urandom(8 << 20))
    tenant = tenant_factory()
    created = client.post("/v1/classifiers", files=nlc_files(), headers=tenant.headers)
    assert created.status_code == 200, created.text
    return tenant, make_available(session, store, tenant.id, created.json()["classifier_id"], model)


@pytest.fixture
def server(settings: Settings) -> Iterator[tuple[int, FastAPI]]:
    """A second API on the test's database and store, served on a real socket."""
    with serving(create_app(settings)) as served:
        yield served


def _start_download(port: int, path: str, key: str) -> socket.socket:
    """A GET of ``path`` whose client reads the reply's first bytes, then nothing more (its
    receive buffer small, so that the server's send waits on it)."""
    conn = socket.socket()
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    conn.connect(("127.0.0.1", port))
    conn.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nX-API-Key: {key}\r\n\r\n".encode())
    conn.settimeout(30)
    assert conn.recv(64).startswith(b"HTTP/1.1 200"), "the download did not start"
    return conn


@pytest.mark.parametrize("route", BUNDLE_ROUTES)
@pytest.mark.parametrize(
    ("range_header", "status"), [("bytes=abc", 400), ("bytes=99999999-", 416), ("bytes=0-99", 206)]
)
def test_an_export_leaves_nothing_in_staging_whatever_its_range(
    client: TestClient,
    estate_factory: Callable[[], Estate],
    settings: Settings,
    route: str,
    range_header: str,
    status: int,
) -> None:
    estate = estate_factory()
    tenant, url = estate.tenant, BUNDLE_ROUTES[route].format(cid=estate.classifier["classifier_id"])

    replies = [client.get(url, headers={**tenant.headers, "Range": range_header}) for _ in range(3)]

    assert [r.status_code for r in replies] == [status] * 3, replies[0].text
    assert _staged(settings) == []


def test_an_export_whose_client_leaves_mid_download_leaves_nothing_in_staging(
    server: tuple[int, FastAPI],
    heavy: tuple[Any, str],
    settings: Settings,
    wait_until: Callable[..., Any],
) -> None:
    port, _ = server
    tenant, cid = heavy
    download = _start_download(port, f"/v1/classifiers/{cid}/bundle", tenant.api_key)
    assert [p.suffix for p in _staged(settings)] == [".taas"], "the bundle is staged while it is sent"

    download.close()

    wait_until(lambda: _staged(settings) == [], timeout=10, message="the abandoned bundle removed")


def test_a_bundle_in_flight_counts_against_its_tenants_storage_quota_until_its_download_ends(
    server: tuple[int, FastAPI],
    client: TestClient,
    heavy: tuple[Any, str],
    tenant_factory: Callable[..., Any],
    admin_headers: dict[str, str],
    settings: Settings,
    wait_until: Callable[..., Any],
) -> None:
    port, _ = server
    tenant, cid = heavy
    url = f"/v1/classifiers/{cid}/bundle"
    size = len(client.get(url, headers=tenant.headers).content)
    stored = _stored_bytes(client, admin_headers, tenant.id)
    _set_quota(client, admin_headers, tenant.id, dataset_bytes=stored + size + size // 2)
    download = _start_download(port, url, tenant.api_key)

    refused = client.get(url, headers=tenant.headers)
    upload = client.post(
        "/v1/datasets", content=b"x" * size, headers={**tenant.headers, "Content-Type": "text/csv"}
    )
    unaffected = client.post(
        "/v1/datasets",
        content=b"text,label\nhot?,temperature\nwet?,conditions\n",
        headers={**tenant_factory().headers, "Content-Type": "text/csv"},
    )

    assert refused.status_code == 403, refused.text
    assert refused.json()["description"].startswith(
        f"quota 'dataset_bytes' exceeded: the limit is {stored + size + size // 2}, the tenant has "
        f"{stored} stored and "
    )
    assert upload.status_code == 403, upload.text
    assert unaffected.status_code == 201, unaffected.text
    download.close()
    wait_until(lambda: _staged(settings) == [], timeout=10, message="the download's bundle removed")
    assert client.get(url, headers=tenant.headers).status_code == 200
    assert _staged(settings) == []


def test_an_upload_streaming_past_its_tenants_storage_quota_is_refused_before_it_ends(
    server: tuple[int, FastAPI],
    client: TestClient,
    tenant: Any,
    admin_headers: dict[str, str],
    settings: Settings,
    nothing_left_behind: Callable[[str], None],
) -> None:
    """A tenant at its quota trickling uploads could hold up to the upload limit in staging per
    connection, for as long as it kept sending."""
    port, _ = server
    _set_quota(client, admin_headers, tenant.id, dataset_bytes=1 << 20)
    conn = socket.create_connection(("127.0.0.1", port))
    conn.sendall(
        f"POST /v1/datasets HTTP/1.1\r\nHost: x\r\nX-API-Key: {tenant.api_key}\r\n".encode()
        + f"Content-Type: text/csv\r\nContent-Length: {8 << 20}\r\n\r\n".encode()
        + b"text,label\r\n"
        + b"hot today?,temperature\r\n" * ((3 << 20) // 24)
    )  # 3 MiB of the 8 it declares, then nothing: the server waits for the rest
    conn.settimeout(30)
    head = conn.recv(4096)
    conn.close()

    assert head.startswith(b"HTTP/1.1 403"), head[:200]
    assert b"quota 'dataset_bytes' exceeded: the limit is 1048576" in head
    nothing_left_behind(tenant.id)
    assert _staged(settings) == []


def test_staged_bytes_count_a_tenants_files_and_folders_and_no_one_elses(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "store")
    mine, theirs = "0b9ff0c6-8e24-4a8a-9d0a-2b3c7d5e6f70", "5d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
    store.temp_path(".csv", owner=mine).write_bytes(b"x" * 10)
    folder = store.temp_path(".bundle", owner=mine)
    (folder / "deep").mkdir(parents=True)
    (folder / "deep" / "weights.pt").write_bytes(b"y" * 100)
    store.temp_path(".csv", owner=theirs).write_bytes(b"z" * 1000)
    store.temp_path(".fetch").write_bytes(b"w" * 10000)  # no owner: the node's own

    assert store.staged_bytes(mine) == 110
    assert store.staged_bytes(theirs) == 1000
    assert store.staged_bytes("7e6d5c4b-3a29-4180-8f7e-6d5c4b3a2918") == 0


def test_a_download_of_a_satisfiable_range_gets_exactly_that_range(
    client: TestClient, estate_factory: Callable[[], Estate]
) -> None:
    estate = estate_factory()
    tenant, url = estate.tenant, f"/v1/classifiers/{estate.classifier['classifier_id']}/bundle"
    whole = client.get(url, headers=tenant.headers).content

    part = client.get(url, headers={**tenant.headers, "Range": "bytes=10-19"})

    assert part.status_code == 206
    assert part.content == whole[10:20]


@pytest.mark.parametrize(
    "sent",
    [
        {"headers": {"Content-Encoding": "gzip"}, "content": gzip.compress(b"x" * 100)[:10]},  # cut short
        {"headers": {"Content-Length": "5000"}, "content": b"abc"},  # less than it declares
    ],
    ids=["gzip-cut-short", "short"],
)
def test_a_download_sent_with_a_bad_body_is_served_whole_with_no_error(
    client: TestClient,
    estate_factory: Callable[[], Estate],
    caplog: pytest.LogCaptureFixture,
    sent: dict[str, Any],
) -> None:
    """A file download still receives, to see its client leave, once its reply has begun: the
    body limit then checked the body no GET route reads, and a bad one was a logged 500 with the
    download cut short (found by tests/security/test_header_fuzz.py)."""
    estate = estate_factory()
    url = f"/v1/classifiers/{estate.classifier['classifier_id']}/bundle"
    whole = client.get(url, headers=estate.tenant.headers).content

    reply = client.request(
        "GET", url, headers={**estate.tenant.headers, **sent["headers"]}, content=sent["content"]
    )

    assert reply.status_code == 200 and reply.content == whole
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
