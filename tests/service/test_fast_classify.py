"""Classify from memory (lookup cache + lean ASGI path) answers exactly as the route, asks the
database nothing, and sees every revocation, quota change and deletion at once, on every replica."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel
from sqlalchemy import event
from starlette.types import Receive, Scope, Send

from service.api import fast_classify
from service.api.schemas import Classification, ClassificationCollection
from service.app import create_app
from service.core.settings import Settings
from tests.conftest import METRICS_HEADERS

pytestmark = pytest.mark.dialect_neutral

TEXT = {"text": "is it going to rain"}


@pytest.fixture
def warm(client: TestClient, app: FastAPI, wait_until: Callable[..., Any]) -> Callable[[str, Any], dict]:
    """``warm(classifier_id, tenant)``: classify through the route (which fills the lookup
    cache and loads the model) until the cache holds the lookup, and return the reply. Any
    invalidation heard during a lookup voids its caching, and the tests in the other xdist
    process announce theirs on the same Redis: one such was a flake here."""

    def classified_and_cached(classifier_id: str, tenant: Any) -> dict | None:
        reply = client.post(f"/v1/classifiers/{classifier_id}/classify", json=TEXT, headers=tenant.headers)
        assert reply.status_code == 200, reply.text
        return reply.json() if len(app.state.lookups) == 1 else None

    def fill(classifier_id: str, tenant: Any) -> dict:
        wait_until(app.state.lookups.usable, message="the invalidation listener subscribed")
        return wait_until(
            lambda: classified_and_cached(classifier_id, tenant), message="a classify filled the lookup cache"
        )

    return fill


@pytest.fixture
def statements(app: FastAPI, client: TestClient) -> Iterator[list[str]]:
    """The SQL statements the app runs from now on."""
    seen: list[str] = []
    engine = app.state.sessions.kw["bind"]

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    yield seen
    event.remove(engine, "before_cursor_execute", record)


COLLECTION = {"collection": [{"text": "rain?"}, {"text": "how warm is it"}, {"text": "snow"}]}


@pytest.mark.parametrize(
    ("route", "body", "reply_model"),
    [("classify", TEXT, Classification), ("classify_collection", COLLECTION, ClassificationCollection)],
)
def test_a_cached_call_asks_the_database_nothing_and_answers_as_the_route(
    client: TestClient,
    tenant: Any,
    available: str,
    warm: Callable[..., dict],
    statements: list[str],
    route: str,
    body: dict,
    reply_model: type[BaseModel],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    warm(available, tenant)
    url = f"/v1/classifiers/{available}/{route}"
    only_the_route = {**tenant.headers, "Content-Type": "application/vnd.taas+json"}  # FastAPI: JSON
    by_route = client.post(url, json=body, headers=only_the_route)
    statements.clear()
    handed_over: list[object] = []
    monkeypatch.setattr(fast_classify, "_replay", lambda *args: handed_over.append(args))

    cached = client.post(url, json=body, headers=tenant.headers)

    assert cached.status_code == 200
    assert statements == [] and handed_over == [], "answered from memory"
    assert cached.json() == by_route.json()
    reply_model.model_validate(cached.json())  # the documented response model
    samples = {
        (s.labels.get("route"), s.labels.get("status")): s.value
        for family in text_string_to_metric_families(client.get("/metrics", headers=METRICS_HEADERS).text)
        for s in family.samples
        if s.name == "taas_http_requests_total"
    }
    assert samples[(f"/v1/classifiers/{{classifier_id}}/{route}", "200")] == (3 if route == "classify" else 2)


@pytest.fixture
def handed_over(app: FastAPI, monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The query strings of the calls the fast path hands to the app's stack from now on."""
    fast = app.fast_classify  # type: ignore[attr-defined]
    seen: list[bytes] = []
    route = fast.fallback

    async def recording(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope["query_string"])
        await route(scope, receive, send)

    monkeypatch.setattr(fast, "fallback", recording)
    return seen


def test_a_cached_get_classify_asks_the_database_nothing_and_answers_as_the_json_body(
    client: TestClient,
    tenant: Any,
    available: str,
    warm: Callable[..., dict],
    statements: list[str],
    handed_over: list[bytes],
) -> None:
    by_body = warm(available, tenant)
    statements.clear()
    handed_over.clear()

    by_query = client.get(f"/v1/classifiers/{available}/classify", params=TEXT, headers=tenant.headers)

    assert by_query.status_code == 200
    assert statements == [] and handed_over == [], "answered from memory"
    assert by_query.json() == by_body
    samples = {
        (s.labels.get("method"), s.labels.get("status")): s.value
        for family in text_string_to_metric_families(client.get("/metrics", headers=METRICS_HEADERS).text)
        for s in family.samples
        if s.name == "taas_http_requests_total" and s.labels.get("route", "").endswith("/classify")
    }
    assert samples == {("POST", "200"): 1, ("GET", "200"): 1}


@pytest.mark.parametrize(
    ("query", "status"),
    [
        ({"text": "rain", "version": "1"}, 200),  # a pinned version
        ([("text", "rain"), ("text", "snow")], 200),
        ({"text": "x" * 2049}, 400),  # over max_classify_chars
        ({"text": " "}, 400),
        ({"txt": "rain"}, 400),
    ],
)
def test_a_get_classify_that_memory_cannot_answer_gets_the_routes_answer(
    client: TestClient,
    tenant: Any,
    available: str,
    warm: Callable[..., dict],
    handed_over: list[bytes],
    query: Any,
    status: int,
) -> None:
    warm(available, tenant)
    handed_over.clear()

    reply = client.get(f"/v1/classifiers/{available}/classify", params=query, headers=tenant.headers)

    assert reply.status_code == status, reply.text
    assert len(handed_over) == 1


@pytest.mark.parametrize(
    ("body", "headers", "status"),
    [
        ({"text": "   "}, {}, 400),  # NLC: text must not be empty
        ({"text": "x" * 2049}, {}, 400),  # over max_classify_chars
        ({"txt": "rain"}, {}, 400),
        (None, {"content-type": "text/plain"}, 415),  # a type classify does not read
        (None, {"Authorization": "Bearer taas_not-a-key"}, 401),
        (None, {"Authorization": "Digest x"}, 401),
        ({"collection": [{"text": "rain"}]}, {}, 400),  # a collection body sent to classify
    ],
)
def test_what_memory_cannot_answer_gets_the_routes_answer(
    client: TestClient,
    tenant: Any,
    available: str,
    warm: Callable[..., dict],
    body: dict | None,
    headers: dict[str, str],
    status: int,
) -> None:
    warm(available, tenant)
    url = f"/v1/classifiers/{available}/classify"
    sent = {**tenant.headers, **headers}
    if body is None and "content-type" in headers:
        reply = client.post(url, content=b'{"text": "rain"}', headers=sent)
    else:
        reply = client.post(url, json=TEXT if body is None else body, headers=sent)
    assert reply.status_code == status, reply.text


def test_another_tenants_cached_classifier_is_still_404(
    client: TestClient,
    tenant: Any,
    tenant_factory: Callable[..., Any],
    available: str,
    warm: Callable[..., dict],
) -> None:
    warm(available, tenant)
    other = tenant_factory()
    reply = client.post(f"/v1/classifiers/{available}/classify", json=TEXT, headers=other.headers)
    assert reply.status_code == 404


def test_the_rate_holds_on_a_warm_cache(
    client: TestClient, tenant: Any, admin_headers: dict[str, str], available: str, warm: Callable[..., dict]
) -> None:
    warm(available, tenant)
    client.patch(f"/v1/admin/tenants/{tenant.id}/quotas", json={"classify_rps": 1}, headers=admin_headers)
    url = f"/v1/classifiers/{available}/classify"
    started = time.monotonic()
    codes = [client.post(url, json=TEXT, headers=tenant.headers).status_code for _ in range(6)]
    # 1 call a second and a burst of 2 s: at most 2 calls, and one more a second, go through
    allowed = 2 + math.floor(time.monotonic() - started)
    assert codes[0] == 200 and 429 in codes and codes.count(200) <= allowed, codes
    client.patch(f"/v1/admin/tenants/{tenant.id}/quotas", json={"classify_rps": 0}, headers=admin_headers)
    assert client.post(url, json=TEXT, headers=tenant.headers).status_code == 403


@pytest.mark.parametrize("cached", [False, True], ids=["route", "cached"])
def test_a_collection_is_charged_a_text_each(
    client: TestClient,
    tenant: Any,
    admin_headers: dict[str, str],
    available: str,
    warm: Callable[..., dict],
    statements: list[str],
    cached: bool,
) -> None:
    client.patch(f"/v1/admin/tenants/{tenant.id}/quotas", json={"classify_rps": 2}, headers=admin_headers)
    if cached:
        warm(available, tenant)
    statements.clear()
    ten = {"collection": [{"text": f"rain {i}?"} for i in range(10)]}

    served = client.post(f"/v1/classifiers/{available}/classify_collection", json=ten, headers=tenant.headers)

    # 2 texts a second with a burst of 2 s (4 texts): ten texts are served at once, and owed
    assert served.status_code == 200, served.text
    assert (not statements) == cached  # the cached call took the lean path
    limited = client.post(f"/v1/classifiers/{available}/classify", json=TEXT, headers=tenant.headers)
    assert limited.status_code == 429
    assert int(limited.headers["Retry-After"]) >= 3
    assert "the limit is 2 texts per second" in limited.json()["description"]


def test_a_deleted_classifier_is_404_at_once(
    client: TestClient, tenant: Any, available: str, warm: Callable[..., dict]
) -> None:
    warm(available, tenant)
    assert client.delete(f"/v1/classifiers/{available}", headers=tenant.headers).status_code == 200
    reply = client.post(f"/v1/classifiers/{available}/classify", json=TEXT, headers=tenant.headers)
    assert reply.status_code == 404


@pytest.fixture
def replica(settings: Settings) -> Iterator[TestClient]:
    """A second API process on the same database and Redis."""
    with TestClient(create_app(settings)) as second:
        yield second


@pytest.mark.parametrize("change", ["revoke", "rotate", "quota", "delete"])
def test_a_change_made_on_one_replica_reaches_the_others_warm_cache(
    client: TestClient,
    replica: TestClient,
    tenant: Any,
    admin_headers: dict[str, str],
    available: str,
    wait_until: Callable[..., Any],
    change: str,
) -> None:
    url = f"/v1/classifiers/{available}/classify"
    lookups = replica.app.state.lookups  # type: ignore[attr-defined]
    wait_until(lookups.usable, message="the replica's listener subscribed")
    for _ in range(2):
        assert replica.post(url, json=TEXT, headers=tenant.headers).status_code == 200
    assert len(lookups) == 1

    admin = f"/v1/admin/tenants/{tenant.id}"
    if change == "revoke":
        key_id = client.get(f"/v1/admin/tenants?name={tenant.name}", headers=admin_headers).json()["tenants"]
        key_id = next(t for t in key_id if t["tenant_id"] == tenant.id)["keys"][0]["key_id"]
        client.delete(f"{admin}/keys/{key_id}", headers=admin_headers).raise_for_status()
        expected = 401
    elif change == "rotate":
        client.post(f"{admin}/keys", json={"revoke_others": True}, headers=admin_headers).raise_for_status()
        expected = 401
    elif change == "quota":
        client.patch(f"{admin}/quotas", json={"classify_rps": 0}, headers=admin_headers).raise_for_status()
        expected = 403
    else:
        client.delete(f"/v1/classifiers/{available}", headers=tenant.headers).raise_for_status()
        expected = 404

    wait_until(lambda: len(lookups) == 0, timeout=2, message="the replica heard of the change")
    assert replica.post(url, json=TEXT, headers=tenant.headers).status_code == expected


def test_the_body_watch_gives_up_on_an_overdue_read_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """One watchdog for every fast-path body read (a timer each cost 15 µs a call): an overdue
    read is given up, a read that answers in time is not, and another cancel is never taken
    for the watchdog's."""
    monkeypatch.setattr(fast_classify, "FIRST_CHUNK_SECONDS", 0.2)
    watch = fast_classify._BodyWatch()

    def answering_after(seconds: float) -> Callable[[], Any]:
        async def receive() -> dict[str, Any]:
            await asyncio.sleep(seconds)
            return {"type": "http.request", "body": b"{}"}

        return receive

    async def run() -> None:
        started = time.monotonic()
        with pytest.raises(fast_classify._Stalled):
            await watch.first_message(answering_after(60))
        assert time.monotonic() - started < 2
        assert (await watch.first_message(answering_after(0.05)))["body"] == b"{}"
        cancelled = asyncio.ensure_future(watch.first_message(answering_after(60)))
        await asyncio.sleep(0.01)
        cancelled.cancel()  # the server's, say for a client that left
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        many = await asyncio.gather(*(watch.first_message(answering_after(0.01)) for _ in range(50)))
        assert len(many) == 50

    asyncio.run(run())
