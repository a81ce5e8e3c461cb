"""Gzip of the tenant API's larger replies (``service.api.compression``), never the admin API's."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from service.storage.store import ArtifactStore
from tests.conftest import TenantHandle
from tests.service.helpers import make_available
from trainer.evaluate import classification_report

pytestmark = pytest.mark.dialect_neutral

GZIP = {"Accept-Encoding": "gzip"}


@pytest.fixture
def many_class_metrics() -> dict[str, Any]:
    """Metrics of 400 classes: a status reply of some 60 KB."""
    labels = [f"intent-{i:03d}" for i in range(400)]
    true = [label for label in labels for _ in range(3)]
    predicted = [labels[(i + 1) % len(labels)] if i % 7 == 0 else t for i, t in enumerate(true)]
    return classification_report(true, predicted)


@pytest.fixture
def big_status(
    tenant: TenantHandle,
    create_classifier: Callable[..., httpx.Response],
    session: Session,
    store: ArtifactStore,
    tiny_model: Path,
    many_class_metrics: dict[str, Any],
) -> str:
    cid = create_classifier(tenant).json()["classifier_id"]
    return make_available(session, store, tenant.id, cid, tiny_model, metrics=many_class_metrics)


def raw_get(client: TestClient, url: str, headers: dict[str, str]) -> tuple[httpx.Response, bytes]:
    """GET ``url``: the reply and its body as it came over the wire (httpx would decode it)."""
    with client.stream("GET", url, headers=headers) as reply:
        return reply, b"".join(reply.iter_raw())


def test_a_big_status_is_gzipped_for_a_client_that_accepts_it(
    client: TestClient, tenant: TenantHandle, big_status: str, many_class_metrics: dict[str, Any]
) -> None:
    url = f"/v1/classifiers/{big_status}"
    plain, plain_body = raw_get(client, url, {**tenant.headers, "Accept-Encoding": "identity"})
    packed, packed_body = raw_get(client, url, {**tenant.headers, **GZIP})

    assert "content-encoding" not in plain.headers
    assert packed.headers["content-encoding"] == "gzip"
    assert "Accept-Encoding" in packed.headers["vary"]
    assert int(packed.headers["content-length"]) == len(packed_body)
    assert len(packed_body) * 5 < len(plain_body)
    assert gzip.decompress(packed_body) == plain_body
    assert json.loads(plain_body)["metrics"] == many_class_metrics


def test_small_replies_and_head_go_uncompressed(
    client: TestClient, tenant: TenantHandle, big_status: str
) -> None:
    small, small_body = raw_get(client, "/v1/classifiers", {**tenant.headers, **GZIP})
    assert "content-encoding" not in small.headers
    assert len(small_body) < 1024

    url = f"/v1/classifiers/{big_status}"
    head = client.head(url, headers={**tenant.headers, **GZIP})
    get, _ = raw_get(client, url, {**tenant.headers, "Accept-Encoding": "identity"})
    assert head.status_code == 200
    assert "content-encoding" not in head.headers
    assert head.headers["content-length"] == get.headers["content-length"]


def test_admin_replies_are_never_compressed(
    client: TestClient, admin_headers: dict[str, str], tenant_factory: Callable[..., TenantHandle]
) -> None:
    """They carry API keys beside names a caller chose: compressed, their length would leak
    the key (BREACH)."""
    for _ in range(30):
        tenant_factory()
    listing, body = raw_get(client, "/v1/admin/tenants", {**admin_headers, **GZIP})
    assert listing.status_code == 200
    assert len(body) > 1024
    assert "content-encoding" not in listing.headers


@pytest.mark.parametrize(
    ("accepted", "gzipped"),
    [
        ("gzip", True),
        ("br, GZIP;q=0.5", True),
        ("x-gzip", True),
        ("identity, gzip;q=0", False),  # RFC 9110 12.5.3: q=0 is "not acceptable"; it got gzip
        ("gzip;q=0.000", False),
        ("gzip;q=nonsense", False),
        ("nogzip", False),
        ("identity", False),
        ("", False),
    ],
)
def test_gzip_goes_only_where_its_quality_is_above_zero(
    client: TestClient, tenant: TenantHandle, big_status: str, accepted: str, gzipped: bool
) -> None:
    url = f"/v1/classifiers/{big_status}"
    reply, body = raw_get(client, url, {**tenant.headers, "Accept-Encoding": accepted})

    assert reply.status_code == 200
    assert (reply.headers.get("content-encoding") == "gzip") is gzipped
    assert json.loads(gzip.decompress(body) if gzipped else body)["classifier_id"] == big_status


def test_classify_replies_are_never_gzipped_whichever_path_answers(
    client: TestClient, tenant: TenantHandle, big_status: str
) -> None:
    """The fast path answers them ahead of the middleware; the route (a pinned version, a first
    call) gzipped the same reply, with a Vary the fast path never sends."""
    body = {"collection": [{"text": f"is it cold in town number {i}"} for i in range(30)]}
    for query in ("", "?version=1"):
        reply = client.post(
            f"/v1/classifiers/{big_status}/classify_collection{query}",
            json=body,
            headers={**tenant.headers, **GZIP},
        )
        assert reply.status_code == 200 and len(reply.content) > 1024, reply.text
        assert "content-encoding" not in reply.headers and "vary" not in reply.headers
