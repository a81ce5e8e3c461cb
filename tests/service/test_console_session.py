"""The tenant console's session over HTTP, against the machine's Redis: sign-in, the cookie's
attributes, the session standing in for the key on /v1 (reads as they are, changes only with
the CSRF token), revocation and sign-out ending it, and the keys it refuses."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from service.api.console import session as console_session
from tests.conftest import TenantHandle

pytestmark = pytest.mark.dialect_neutral

CSV = b"text,label\nhot today?,temperature\nraining?,conditions\n"


def _sign_in(client: TestClient, key: str) -> str:
    """Sign in with ``key``; the session's CSRF token, read from the console page."""
    reply = client.post("/console/login", data={"key": key}, follow_redirects=False)
    assert reply.status_code == 303 and reply.headers["location"] == "/console", reply.text
    page = client.get("/console")
    assert page.status_code == 200
    return page.text.split('name="csrf-token" content="', 1)[1].split('"', 1)[0]


def test_the_session_stands_in_for_the_key_and_changes_need_its_csrf_token(
    client: TestClient, tenant: TenantHandle
) -> None:
    assert client.get("/console", follow_redirects=False).headers["location"] == "/console/login"
    reply = client.post("/console/login", data={"key": tenant.api_key}, follow_redirects=False)
    cookie = reply.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/;" in cookie
    assert tenant.api_key not in cookie  # the key never travels again
    csrf = _sign_in(client, tenant.api_key)
    page = client.get("/console")
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY" and page.headers["cache-control"] == "no-store"

    assert client.get("/v1/classifiers").status_code == 200  # a read: the cookie is enough
    refused = client.post("/v1/datasets?name=d", content=CSV, headers={"Content-Type": "text/csv"})
    assert refused.status_code == 403 and "CSRF" in refused.json()["description"]
    wrong = client.post(
        "/v1/datasets?name=d", content=CSV, headers={"Content-Type": "text/csv", "X-CSRF-Token": "x"}
    )
    assert wrong.status_code == 403
    stored = client.post(
        "/v1/datasets?name=d", content=CSV, headers={"Content-Type": "text/csv", "X-CSRF-Token": csrf}
    )
    assert stored.status_code == 201, stored.text
    listed = client.get("/v1/datasets").json()["datasets"]
    assert [d["dataset_id"] for d in listed] == [stored.json()["dataset_id"]]  # this tenant's own


def test_revoking_the_key_or_signing_out_ends_the_session(
    client: TestClient,
    tenant: TenantHandle,
    admin_headers: dict[str, str],
) -> None:
    csrf = _sign_in(client, tenant.api_key)
    cookie = client.cookies[console_session.COOKIE]
    assert client.post("/console/logout", data={"csrf": "wrong"}, follow_redirects=False).status_code == 403
    client.post("/console/logout", data={"csrf": csrf}, follow_redirects=False)
    client.cookies.set(console_session.COOKIE, cookie)  # a copy kept from before
    assert client.get("/v1/classifiers").status_code == 401

    _sign_in(client, tenant.api_key)
    found = client.get("/v1/admin/tenants", params={"name": tenant.name}, headers=admin_headers)
    tenants = found.json()["tenants"]
    keys = next(t for t in tenants if t["tenant_id"] == tenant.id)["keys"]
    revoked = client.delete(f"/v1/admin/tenants/{tenant.id}/keys/{keys[0]['key_id']}", headers=admin_headers)
    assert revoked.status_code == 200, revoked.text
    assert client.get("/v1/classifiers").status_code == 401
    assert client.get("/console", follow_redirects=False).headers["location"] == "/console/login"


def test_unknown_admin_and_malformed_keys_and_cookies_open_nothing(
    client: TestClient, tenant_factory: Callable[..., TenantHandle], admin_headers: dict[str, str]
) -> None:
    admin_key = admin_headers["Authorization"].removeprefix("Bearer ")
    refused = client.post("/console/login", data={"key": admin_key}, follow_redirects=False)
    assert refused.status_code == 401 and "/ops" in refused.text
    unknown = client.post("/console/login", data={"key": "taas_nope"}, follow_redirects=False)
    assert unknown.status_code == 401 and "unknown or revoked" in unknown.text
    for forged in ("", "x" * 32, "../" * 11, "x" * 31 + "!"):
        client.cookies.set(console_session.COOKIE, forged)
        assert client.get("/v1/classifiers").status_code == 401
        assert client.post("/v1/classifiers/x/classify", json={"text": "hi"}).status_code == 401
