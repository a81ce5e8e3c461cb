"""/ops login: only the admin key opens a session, kept in a secure cookie and live in Redis until
logout; nothing without one, and nothing while Redis is unreachable."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from benchmarks.chaos import ExternalRedis
from service.app import create_app
from service.core.settings import Settings
from tests.conftest import ADMIN_KEY, TenantHandle
from tests.ops.conftest import log_in

pytestmark = pytest.mark.dialect_neutral

PAGES = ["/ops", "/ops/jobs", "/ops/jobs/some-job", "/ops/tenants"]
FEED = ["/ops/api/overview", "/ops/api/jobs", "/ops/api/jobs/some-job", "/ops/api/tenants"]


def test_admin_key_opens_an_http_only_strict_session_cookie_and_no_key_in_the_url(client: TestClient) -> None:
    reply = client.post("/ops/login", data={"key": ADMIN_KEY}, follow_redirects=False)

    assert reply.status_code == 303 and reply.headers["location"] == "/ops"
    cookie = reply.headers["set-cookie"]
    assert cookie.startswith("taas_ops=") and ADMIN_KEY not in cookie
    assert {"HttpOnly", "SameSite=strict", "Path=/ops"} <= {p.strip() for p in cookie.split(";")}
    assert client.get("/ops").status_code == 200


@pytest.mark.parametrize("path", PAGES)
def test_pages_without_a_session_redirect_to_the_login_form(client: TestClient, path: str) -> None:
    reply = client.get(path, follow_redirects=False)

    assert reply.status_code == 303 and reply.headers["location"] == "/ops/login"


@pytest.mark.parametrize("path", FEED)
def test_feed_without_a_session_is_401_without_a_password_prompt(client: TestClient, path: str) -> None:
    reply = client.get(path)

    assert reply.status_code == 401
    assert "www-authenticate" not in reply.headers


def test_a_tenant_key_cannot_log_in(client: TestClient, tenant: TenantHandle) -> None:
    log_in(client, tenant.api_key)

    assert "taas_ops" not in client.cookies
    assert client.get("/ops/api/overview").status_code == 401
    assert client.get("/ops/api/overview", headers=tenant.headers).status_code == 401


def test_a_tampered_cookie_is_no_session(ops_client: TestClient) -> None:
    expires, nonce, signature = ops_client.cookies["taas_ops"].split(".")
    ops_client.cookies.clear()
    ops_client.cookies.set("taas_ops", f"{int(expires) + 3600}.{nonce}.{signature}", path="/ops")

    assert ops_client.get("/ops/api/overview").status_code == 401


def test_a_cookie_or_csrf_token_with_non_ascii_bytes_is_refused_not_a_500(
    ops_client: TestClient, tenant: TenantHandle
) -> None:
    """A forged cookie (set from a sibling subdomain, say) made every page a 500, logout too."""
    expires, nonce, _ = ops_client.cookies["taas_ops"].split(".")
    forged = {"Cookie": f"taas_ops={expires}.{nonce}.\u00e9".encode()}
    with TestClient(ops_client.app) as fresh:
        assert fresh.get("/ops/api/overview", headers=forged).status_code == 401
        assert fresh.get("/ops", headers=forged, follow_redirects=False).status_code == 303

    action = ops_client.post(
        f"/ops/api/tenants/{tenant.id}/keys", json={}, headers={"X-CSRF-Token": "\u00e9".encode()}
    )
    logout = ops_client.post("/ops/logout", data={"csrf": "\u00e9"}, follow_redirects=False)

    assert (action.status_code, logout.status_code) == (403, 403)


@pytest.mark.parametrize("path", ["/ops", "/ops/login", "/ops/api/overview", "/ops/static/ops.js"])
def test_operator_pages_forbid_framing_and_foreign_scripts_and_are_never_cached(
    ops_client: TestClient, path: str
) -> None:
    reply = ops_client.get(path)

    assert reply.status_code == 200
    policy = reply.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in policy and "script-src 'self';" in policy
    assert reply.headers["x-frame-options"] == "DENY"
    assert reply.headers["cache-control"] == "no-store"
    assert reply.headers["x-content-type-options"] == "nosniff"


def test_admin_replies_carrying_a_new_key_are_never_cached(client: TestClient) -> None:
    reply = client.post(
        "/v1/admin/tenants", json={"name": "cached?"}, headers={"Authorization": f"Bearer {ADMIN_KEY}"}
    )

    assert reply.status_code == 201 and "api_key" in reply.json()
    assert reply.headers["cache-control"] == "no-store"
    assert "content-security-policy" not in client.get("/v1/classifiers").headers


def test_an_admin_key_set_with_a_trailing_newline_still_logs_in(
    settings_factory: Callable[..., Settings],
) -> None:
    """An env file or a mounted secret often ends the key in a newline; every presented key is
    stripped, so the key in force must be too, or nobody could ever present it."""
    with TestClient(create_app(settings_factory(admin_key=ADMIN_KEY + "\n"))) as client:
        log_in(client)

        assert client.get("/ops/api/overview").status_code == 200
        listed = client.get("/v1/admin/tenants", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        assert listed.status_code == 200


def test_logout_needs_the_csrf_token_and_ends_the_session(ops_client: TestClient, csrf: str) -> None:
    refused = ops_client.post("/ops/logout", data={"csrf": "wrong"}, follow_redirects=False)
    assert refused.status_code == 403

    reply = ops_client.post("/ops/logout", data={"csrf": csrf}, follow_redirects=False)

    assert reply.status_code == 303 and reply.headers["location"] == "/ops/login"
    assert ops_client.get("/ops/api/overview").status_code == 401


def test_a_logout_without_the_cookie_leaves_the_session_and_the_cookie_alone(
    ops_client: TestClient, csrf: str
) -> None:
    """Another site's form posts to /ops/logout without the cookie (SameSite=Strict): its reply
    deleted the operator's cookie, while the session stayed live on the server."""
    cookie = ops_client.cookies["taas_ops"]
    ops_client.cookies.clear()

    forged = ops_client.post("/ops/logout", follow_redirects=False)

    assert forged.status_code == 303 and "set-cookie" not in forged.headers
    ops_client.cookies.set("taas_ops", cookie, path="/ops")
    assert ops_client.get("/ops/api/overview").status_code == 200


def test_a_copy_of_the_cookie_is_refused_after_logout(ops_client: TestClient, csrf: str) -> None:
    copied = ops_client.cookies["taas_ops"]

    ops_client.post("/ops/logout", data={"csrf": csrf}, follow_redirects=False)
    ops_client.cookies.set("taas_ops", copied, path="/ops")

    assert ops_client.get("/ops/api/overview").status_code == 401
    assert ops_client.get("/ops", follow_redirects=False).headers["location"] == "/ops/login"


def test_while_redis_is_unreachable_no_session_is_valid_and_the_dashboard_says_why(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    server = ExternalRedis(tmp_path / "redis")
    server.start()
    try:
        with TestClient(create_app(settings_factory(redis_url=server.url))) as client:
            log_in(client)
            assert client.get("/ops/api/overview").status_code == 200
            # when
            server.kill()
            # then
            feed = client.get("/ops/api/overview")
            page = client.get("/ops")
            login = client.post("/ops/login", data={"key": ADMIN_KEY}, follow_redirects=False)
            form = client.get("/ops/login")
    finally:
        server.kill()
    assert feed.status_code == 503 and "Redis is unreachable" in feed.json()["description"]
    assert page.status_code == login.status_code == form.status_code == 503
    assert all("cannot check sessions" in r.text for r in (page, login, form))
    # where Redis listens is the log's to say, not a page anyone can open
    assert all(str(server.port) not in r.text for r in (feed, page, login, form))
