"""Requests a browser makes on another site's behalf (``service.api.cross_site``).

A browser that once had a key typed into its Basic prompt sends it with every request any page
makes to taas. Before, every 401 asked for Basic credentials, and state-changing routes took
any origin and any content type: a ``text/plain`` POST from any page to ``/v1/webhook_secret``
rotated the visitor's secret, and a cancel, a promote or an import were as easy."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from starlette.routing import BaseRoute

from service.app import create_app
from service.core.settings import Settings
from tests.security.conftest import LABELLED, Estate

pytestmark = pytest.mark.dialect_neutral

EVIL = "https://evil.example"
CROSS_SITE = [
    {"Origin": EVIL},
    {"Origin": "null"},  # a sandboxed frame, a data: URL
    {"Origin": "http://testserver:8080"},  # this host on another port is another origin
    {"Origin": "https://testserver"},  # ... and so is it under another scheme
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},  # a sibling subdomain's page
    {"Origin": "http://testserver", "Sec-Fetch-Site": "cross-site"},
    {"Origin": "null", "Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "bogus"},
]


def _unsafe_routes(routes: Iterable[BaseRoute]) -> Iterator[tuple[str, str]]:
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            yield from _unsafe_routes(included.routes)
        elif isinstance(route, APIRoute):
            for method in sorted(route.methods - {"GET", "HEAD"}):
                yield method, re.sub(r"\{[^}]+\}", str(uuid.uuid4()), route.path)


def test_no_401_asks_a_browser_for_basic_credentials_unless_the_operator_opts_in(
    client: TestClient, settings_factory: Callable[..., Settings]
) -> None:
    for path in ("/v1/classifiers", "/v1/webhook_secret", "/v1/admin/tenants"):
        reply = client.get(path)
        assert reply.status_code == 401
        assert reply.headers["www-authenticate"] == 'Bearer realm="taas"', path
    with TestClient(create_app(settings_factory(basic_auth_challenge=True))) as asking:
        challenged = asking.get("/v1/classifiers")
    assert challenged.headers["www-authenticate"] == 'Basic realm="taas", Bearer realm="taas"'


@pytest.mark.parametrize("foreign", CROSS_SITE, ids=lambda h: ",".join(f"{k}={v}" for k, v in h.items()))
def test_every_route_that_changes_something_refuses_another_sites_page(
    app: FastAPI, client: TestClient, estate_factory: Callable[[], Estate], foreign: dict[str, str]
) -> None:
    estate = estate_factory()
    routes = sorted(set(_unsafe_routes(app.routes)))
    assert ("POST", "/v1/webhook_secret") in routes and ("POST", "/ops/login") in routes

    for method, path in routes:
        reply = client.request(method, path, headers={**estate.tenant.headers, **foreign})

        assert reply.status_code == 403, (method, path, reply.text)
        assert reply.json()["description"].startswith("cross-site request refused: a page of "), (
            method,
            path,
        )


def test_a_page_of_another_site_rotates_no_secret_and_cancels_promotes_or_imports_nothing(
    client: TestClient, estate_factory: Callable[[], Estate]
) -> None:
    estate = estate_factory()
    tenant, cid = estate.tenant, estate.classifier["classifier_id"]
    secret = client.get("/v1/webhook_secret", headers=tenant.headers).json()["secret"]
    bundle = client.get(f"/v1/classifiers/{cid}/bundle", headers=tenant.headers).content
    before = client.get("/v1/classifiers", headers=tenant.headers).json()
    page = {**tenant.headers, "Origin": EVIL}  # the credentials the browser remembered

    replies = [
        client.post("/v1/webhook_secret", headers={**page, "Content-Type": "text/plain"}),
        client.post(f"/v1/classifiers/{cid}/cancel", headers=page),
        client.post(f"/v1/classifiers/{cid}/versions/1/promote", headers=page),
        client.post("/v1/classifiers/import", headers=page, files={"bundle": ("b.taas", bundle)}),
        client.delete(f"/v1/classifiers/{cid}", headers=page),
        client.post("/v1/datasets", headers={**page, "Content-Type": "text/csv"}, content=LABELLED),
    ]

    assert [r.status_code for r in replies] == [403] * len(replies), [r.text for r in replies]
    assert client.get("/v1/webhook_secret", headers=tenant.headers).json()["secret"] == secret
    assert client.get("/v1/classifiers", headers=tenant.headers).json() == before
    assert len(client.get("/v1/datasets", headers=tenant.headers).json()["datasets"]) == 1


@pytest.mark.parametrize(
    "own",
    [
        {},
        {"Origin": "http://testserver"},
        {"Origin": "http://TestServer:80", "Sec-Fetch-Site": "same-origin"},
    ],
    ids=["api-client", "own-page", "own-page-spelled-otherwise"],
)
def test_api_clients_and_the_services_own_pages_are_not_refused(
    client: TestClient, tenant: Any, own: dict[str, str]
) -> None:
    secret = client.get("/v1/webhook_secret", headers=tenant.headers).json()["secret"]

    rotated = client.post("/v1/webhook_secret", headers={**tenant.headers, **own})

    assert rotated.status_code == 200, rotated.text
    assert rotated.json()["secret"] != secret


def test_an_origin_the_operator_trusts_is_not_refused(
    settings_factory: Callable[..., Settings], tenant: Any
) -> None:
    trusting = create_app(
        settings_factory(trusted_origins="https://console.example.com, https://other.example")
    )
    with TestClient(trusting) as client:
        page = {**tenant.headers, "Origin": "https://console.example.com", "Sec-Fetch-Site": "same-site"}
        assert client.post("/v1/webhook_secret", headers=page).status_code == 200
        assert client.post("/v1/webhook_secret", headers={**page, "Origin": EVIL}).status_code == 403


_CLASSIFY = '{"text": "is it going to rain"}'


@pytest.mark.parametrize(
    ("route", "content_type", "wanted"),
    [
        ("classify", "text/plain", "application/json"),
        ("classify", "application/x-www-form-urlencoded", "application/json"),
        ("classify", "multipart/form-data; boundary=x", "application/json"),
        ("classify", None, "application/json"),
        ("admin", "text/plain;charset=UTF-8", "application/json"),
        ("secret", "text/plain", "application/json"),
        ("dataset", "text/plain", "multipart/form-data, application/json or the data's own type"),
        ("dataset", "application/x-www-form-urlencoded", "multipart/form-data, application/json or"),
        ("dataset", None, "multipart/form-data, application/json or the data's own type"),
    ],
)
def test_a_body_of_a_type_its_route_does_not_read_is_415_naming_what_to_send(
    client: TestClient,
    estate_factory: Callable[[], Estate],
    admin_headers: dict[str, str],
    route: str,
    content_type: str | None,
    wanted: str,
) -> None:
    """Refused whoever sends it: these are the types a page may send across sites without the
    browser asking first, and before they were read as JSON, or spooled and stored."""
    estate = estate_factory()
    tenant, cid = estate.tenant, estate.classifier["classifier_id"]
    path, headers = {
        "classify": (f"/v1/classifiers/{cid}/classify", tenant.headers),
        "admin": ("/v1/admin/tenants", admin_headers),
        "secret": ("/v1/webhook_secret", tenant.headers),
        "dataset": ("/v1/datasets", tenant.headers),
    }[route]
    body = LABELLED if route == "dataset" else ('{"name": "x"}' if route == "admin" else _CLASSIFY)
    sent = dict(headers) if content_type is None else {**headers, "Content-Type": content_type}
    secret = client.get("/v1/webhook_secret", headers=tenant.headers).json()["secret"]

    reply = client.post(path, headers=sent, content=body.encode())

    assert reply.status_code == 415, reply.text
    described = reply.json()["description"]
    assert described.startswith("Content-Type '" if content_type else "a body without a Content-Type")
    assert f"is not read here: send {wanted}" in described
    assert client.get("/v1/webhook_secret", headers=tenant.headers).json()["secret"] == secret
    assert len(client.get("/v1/datasets", headers=tenant.headers).json()["datasets"]) == 1


def test_json_and_the_upload_types_are_read_as_before(
    client: TestClient, estate_factory: Callable[[], Estate]
) -> None:
    estate = estate_factory()
    tenant, cid = estate.tenant, estate.classifier["classifier_id"]
    replies = [
        client.post(f"/v1/classifiers/{cid}/classify", headers=tenant.headers, json={"text": "rain?"}),
        client.post(
            f"/v1/classifiers/{cid}/classify",
            headers={**tenant.headers, "Content-Type": "application/json; charset=utf-8"},
            content=_CLASSIFY.encode(),
        ),
        client.post(
            "/v1/datasets", headers={**tenant.headers, "Content-Type": "application/x-ndjson"}, content=b""
        ),
        client.post("/v1/webhook_secret", headers=tenant.headers),  # no body, no type
    ]

    assert [r.status_code for r in replies] == [200, 200, 400, 200], [r.text for r in replies]
    assert "is not read here" not in replies[2].text
