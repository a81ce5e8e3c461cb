"""HEAD is answered wherever GET is (RFC 9110, section 9.1), as the GET's status and headers
without a body, and the OpenAPI schema stays GET-only."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from starlette.routing import BaseRoute

pytestmark = pytest.mark.dialect_neutral


def _get_paths(routes: Iterable[BaseRoute]) -> Iterator[str]:
    for route in routes:
        included = getattr(route, "original_router", None)  # FastAPI keeps an included router whole
        if included is not None:
            yield from _get_paths(included.routes)
        elif isinstance(route, APIRoute) and "GET" in route.methods:
            yield re.sub(r"\{[^}]+\}", "x", route.path)


def test_every_get_route_answers_head_without_a_body(app: FastAPI, client: TestClient) -> None:
    """A HEAD of /metrics or /ops/login was a 405 (a plain APIRouter is now a lint error)."""
    paths = list(_get_paths(app.routes))
    assert "/metrics" in paths and "/ops/login" in paths and "/v1/classifiers/x" in paths

    for path in paths:
        reply = client.head(path)
        assert reply.status_code != 405 and reply.content == b"", path


def test_head_is_the_gets_status_and_headers(
    client: TestClient, tenant: Any, admin_headers: dict[str, str]
) -> None:
    for path, headers in [
        ("/v1/classifiers", tenant.headers),
        ("/v1/admin/tenants", admin_headers),
        ("/metrics", {}),
        ("/ops/login", {}),
        ("/v1/classifiers/nope", tenant.headers),
        ("/v1/classifiers", {}),
    ]:
        got, head = client.get(path, headers=headers), client.head(path, headers=headers)

        assert head.status_code == got.status_code and head.content == b"", path
        assert head.headers["content-type"] == got.headers["content-type"], path
        if path != "/metrics":  # its counters move between the two calls
            assert head.headers["content-length"] == got.headers["content-length"], path


def test_a_head_of_a_post_only_route_is_405_naming_what_it_takes(client: TestClient, tenant: Any) -> None:
    reply = client.head("/v1/classifiers/x/cancel", headers=tenant.headers)

    assert reply.status_code == 405 and reply.headers["allow"] == "POST"


def test_the_openapi_schema_has_no_head_operations(client: TestClient) -> None:
    operations = client.get("/openapi.json").json()["paths"]

    assert not [path for path, methods in operations.items() if "head" in methods]
