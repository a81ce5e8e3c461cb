"""An address that keeps sending unknown keys is held up (429) before any lookup, per address."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.requests import HTTPConnection

from service.app import create_app
from service.core.errors import TooManyWrongKeys
from service.core.settings import Settings
from service.tenants import failed_keys
from service.tenants.failed_keys import FailedKeys, client_address
from tests.conftest import ADMIN_KEY

pytestmark = pytest.mark.dialect_neutral

BOGUS = {"Authorization": "Bearer not-a-key-of-anyone"}


def _from(host: str) -> HTTPConnection:
    return HTTPConnection({"type": "http", "client": (host, 1234), "headers": []})


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """``clock[0]``: the monotonic time the module sees; tests move it."""
    now = [1000.0]
    monkeypatch.setattr(failed_keys.time, "monotonic", lambda: now[0])
    return now


def test_an_address_may_fail_its_burst_then_one_a_tick(clock: list[float]) -> None:
    keys = FailedKeys(burst=3, per_second=2.0)
    for _ in range(3):
        keys.check(_from("10.0.0.1"))
        keys.failed(_from("10.0.0.1"))

    with pytest.raises(TooManyWrongKeys) as held:
        keys.check(_from("10.0.0.1"))
    assert held.value.retry_after == 1 and held.value.status == 429
    assert "3 at once, then 2 a second" in str(held.value)
    keys.check(_from("10.0.0.2"))  # another address is not held up
    clock[0] += 0.5
    keys.check(_from("10.0.0.1"))  # one more may fail after 1 / per_second


def test_ipv6_counts_by_its_64_and_v4_mapped_as_v4() -> None:
    assert client_address(_from("2001:db8:1:2:aaaa::1")) == client_address(_from("2001:db8:1:2:bbbb::9"))
    assert client_address(_from("2001:db8:1:2::1")) != client_address(_from("2001:db8:1:3::1"))
    assert client_address(_from("::ffff:10.1.2.3")) == "10.1.2.3"
    assert client_address(_from("testclient")) == "testclient"


def test_only_the_latest_addresses_are_kept(clock: list[float]) -> None:
    keys = FailedKeys(burst=1, per_second=0.001, max_addresses=2)
    for host in ("10.0.0.1", "10.0.0.2", "10.0.0.3"):
        keys.failed(_from(host))

    keys.check(_from("10.0.0.1"))  # forgotten: the oldest of three
    with pytest.raises(TooManyWrongKeys):
        keys.check(_from("10.0.0.3"))


@pytest.fixture
def strict(settings_factory: Callable[..., Settings]) -> Iterator[Callable[[str], TestClient]]:
    """``strict(host)``: a client from ``host`` of one app that allows 3 wrong keys, then 1 a minute."""
    app = create_app(settings_factory(wrong_key_burst=3, wrong_keys_per_second=1 / 60))
    clients: list[TestClient] = []

    def connect(host: str) -> TestClient:
        clients.append(TestClient(app, client=(host, 40000)).__enter__())
        return clients[-1]

    yield connect
    for client in clients:
        client.__exit__(None, None, None)


def test_unknown_keys_are_held_up_before_a_lookup_and_only_from_their_address(
    strict: Callable[[str], TestClient], tenant_factory: Callable[..., Any]
) -> None:
    flooder, neighbour = strict("198.51.100.7"), strict("203.0.113.9")
    tenant = tenant_factory()
    codes = [
        flooder.get("/v1/classifiers", headers=BOGUS).status_code,
        flooder.post(
            "/v1/classifiers/00000000-0000-0000-0000-000000000000/classify", json={"text": "x"}, headers=BOGUS
        ).status_code,
        flooder.get("/v1/admin/tenants", headers=BOGUS).status_code,
    ]
    assert codes == [401, 401, 401]

    held = flooder.get("/v1/classifiers", headers=tenant.headers)  # even a right key, from there

    assert held.status_code == 429
    assert int(held.headers["Retry-After"]) >= 59
    assert "too many unknown API keys from this address" in held.json()["description"]
    assert (
        flooder.get("/v1/admin/tenants", headers={"Authorization": f"Bearer {ADMIN_KEY}"}).status_code == 429
    )
    assert neighbour.get("/v1/classifiers", headers=tenant.headers).status_code == 200
    assert neighbour.get("/v1/classifiers", headers=BOGUS).status_code == 401
    # a missing key or the admin key on a tenant route is no guess
    assert neighbour.get("/v1/classifiers").status_code == 401
    admin_as_tenant = {"Authorization": f"Bearer {ADMIN_KEY}"}
    assert [neighbour.get("/v1/classifiers", headers=admin_as_tenant).status_code for _ in range(3)] == [
        403
    ] * 3
    assert neighbour.get("/v1/classifiers", headers=tenant.headers).status_code == 200


def test_the_ops_login_holds_up_a_key_guesser(strict: Callable[[str], TestClient]) -> None:
    guesser = strict("198.51.100.8")
    for guess in ("a", "b", "c"):
        assert guesser.post("/ops/login", data={"key": guess}, follow_redirects=False).status_code == 401

    held = guesser.post("/ops/login", data={"key": ADMIN_KEY}, follow_redirects=False)

    assert held.status_code == 429  # the right key too: a guesser must not learn it guessed right
    assert int(held.headers["Retry-After"]) >= 59
    assert "Too many wrong keys from this address" in held.text
    operator = strict("203.0.113.10")
    assert operator.post("/ops/login", data={"key": ADMIN_KEY}, follow_redirects=False).status_code == 303
