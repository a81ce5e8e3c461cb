"""The SSRF guard of callback URLs and the webhook signature scheme (no database, no network
beyond the resolver; hostnames that must resolve to given addresses patch the resolver)."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import pytest

from service.client.webhooks import InvalidSignature, sign, verify
from service.webhooks.callback_urls import UnsafeCallback, check_callback_url
from service.webhooks.host_lookups import HostLookups, LookupRefused

SECRET = "whsec_test"
BODY = b'{"id":"e1","status":"Available"}'


def _check(url: str, *, allow_private: bool) -> Any:
    return check_callback_url(url, allow_private=allow_private, tenant_id="tenant", timeout=10.0)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1/hook", "loopback"),
        ("http://127.1.2.3:8080/hook", "loopback"),
        ("http://[::1]/hook", "loopback"),
        ("http://localhost:8000/hook", "loopback"),
        ("http://2130706433/hook", "loopback"),  # 127.0.0.1 as one decimal number
        ("http://0x7f.1/hook", "loopback"),
        ("http://[::ffff:127.0.0.1]/hook", "loopback"),
        ("http://[2002:7f00:1::]/hook", "loopback"),  # 6to4 around 127.0.0.1
        ("http://10.0.0.5/hook", "private"),
        ("http://172.16.3.4/hook", "private"),
        ("http://192.168.1.1/hook", "private"),
        ("http://[::ffff:10.1.2.3]/hook", "private"),
        ("http://[64:ff9b::a00:1]/hook", "private"),  # NAT64 around 10.0.0.1
        ("http://[fd00::1]/hook", "private"),
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://[fe80::1]/hook", "link-local"),
        ("http://0.0.0.0/hook", "unspecified"),
        ("http://[::]/hook", "unspecified"),
        ("http://224.0.0.1/hook", "multicast"),
        ("http://240.0.0.1/hook", "reserved"),
        ("http://100.64.0.1/hook", "non-global"),  # carrier-grade NAT
    ],
)
def test_non_public_addresses_are_refused(url: str, why: str) -> None:
    with pytest.raises(UnsafeCallback, match=f"a {why} address"):
        _check(url, allow_private=False)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://93.184.216.34/hook", "http:// or https://"),
        ("file:///etc/passwd", "http:// or https://"),
        ("gopher://93.184.216.34:70/_x", "http:// or https://"),
        ("javascript:alert(1)", "http:// or https://"),
        ("93.184.216.34/hook", "http:// or https://"),
        ("http:///hook", "no host"),
        ("http://user:pw@93.184.216.34/hook", "credentials"),
        ("http://93.184.216.34:99999/hook", "not a valid URL"),
        ("http://93.184.216.34:0/hook", "port 0"),
        ("http://no-such-host.invalid/hook", "does not resolve"),
        ("http://93.184.216.34/" + "a" * 2048, "at most 2048"),
    ],
)
def test_malformed_or_non_http_urls_are_refused(url: str, why: str) -> None:
    with pytest.raises(UnsafeCallback, match=why):
        _check(url, allow_private=True)


def _resolves_to(monkeypatch: pytest.MonkeyPatch, host: str, *addresses: str) -> None:
    real = socket.getaddrinfo

    def fake(name: str, port: Any, *args: Any, **kwargs: Any) -> Any:
        if name != host:
            return real(name, port, *args, **kwargs)
        return [
            (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
            for a in addresses
        ]

    monkeypatch.setattr(socket, "getaddrinfo", fake)


def test_a_hostname_resolving_to_a_private_address_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _resolves_to(monkeypatch, "hooks.example.com", "10.20.30.40")

    with pytest.raises(UnsafeCallback, match="'hooks.example.com' resolves to 10.20.30.40, a private"):
        _check("https://hooks.example.com/taas", allow_private=False)


def test_a_hostname_is_refused_when_any_of_its_addresses_is_not_public(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _resolves_to(monkeypatch, "mixed.example.com", "93.184.216.34", "fe80::1")

    with pytest.raises(UnsafeCallback, match="link-local"):
        _check("https://mixed.example.com/taas", allow_private=False)


def test_a_public_host_is_pinned_to_the_checked_address(monkeypatch: pytest.MonkeyPatch) -> None:
    _resolves_to(monkeypatch, "hooks.example.com", "93.184.216.34")

    target = _check("https://hooks.example.com/taas?x=1#frag", allow_private=False)

    assert target.urls == ("https://93.184.216.34:443/taas?x=1",)
    assert (target.host, target.server_name) == ("hooks.example.com", "hooks.example.com")


def test_allow_private_lets_a_local_receiver_through() -> None:
    target = _check("http://localhost:8081/hook", allow_private=True)

    assert set(target.urls) <= {"http://127.0.0.1:8081/hook", "http://[::1]:8081/hook"} and target.urls
    assert (target.host, target.server_name) == ("localhost:8081", None)


def test_a_signature_verifies_and_gives_its_timestamp() -> None:
    header = sign(SECRET, BODY, 1_700_000_000)

    assert header.startswith("t=1700000000,v1=")
    assert verify(SECRET, BODY, header, now=1_700_000_100) == 1_700_000_000


@pytest.mark.parametrize(
    ("secret", "body", "now", "why"),
    [
        ("whsec_other", BODY, 1_700_000_000, "no v1 signature matches"),
        (SECRET, BODY.replace(b"Available", b"Failed"), 1_700_000_000, "no v1 signature matches"),
        (SECRET, BODY, 1_700_000_301, "a replay"),
        (SECRET, BODY, 1_699_999_699, "a replay"),
    ],
)
def test_a_wrong_secret_a_changed_body_or_an_old_timestamp_is_refused(
    secret: str, body: bytes, now: int, why: str
) -> None:
    header = sign(SECRET, BODY, 1_700_000_000)

    with pytest.raises(InvalidSignature, match=why):
        verify(secret, body, header, now=now)


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "v1=abc",
        "t=soon,v1=abc",
        "t=1,t=2,v1=abc",
        "t=1700000000",
        "garbage",
        "t=1700000000,v1=\u00e9",
        "t=1" + "0" * 320 + ",v1=ab",  # an OverflowError, not InvalidSignature
        "t=+1700000000,v1=ab",
    ],
)
def test_a_malformed_signature_header_is_refused(header: str | None) -> None:
    with pytest.raises(InvalidSignature):
        verify(SECRET, BODY, header, now=1_700_000_000)


def test_every_checked_address_is_kept_in_order_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the first was ever tried: a receiver whose first address took no connection got nothing."""
    _resolves_to(monkeypatch, "two.example.com", "2606:2800:220:1::1", "93.184.216.34", "93.184.216.34")

    target = _check("http://two.example.com/taas", allow_private=False)

    assert target.urls == ("http://[2606:2800:220:1::1]:80/taas", "http://93.184.216.34:80/taas")


def test_a_tenants_hung_lookups_hold_up_its_own_next_ones_and_no_other_tenants(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One tenant's name servers that never answer filled the webhook worker's eight shared
    resolver threads, and every other tenant's attempts timed out behind them."""
    answer = threading.Event()
    real = socket.getaddrinfo

    def name_servers(host: str, *args: Any, **kwargs: Any) -> Any:
        if host == "hangs.example":
            answer.wait(timeout=30)
            raise socket.gaierror("no answer")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", name_servers)
    lookups = HostLookups(per_tenant=2)
    for _ in range(2):
        with pytest.raises(LookupRefused, match="took longer than 0.2 s"):
            lookups.resolve("slow", "hangs.example", 80, timeout=0.2)

    started = time.monotonic()
    with pytest.raises(LookupRefused, match="2 earlier lookups of this tenant's hosts are still running"):
        lookups.resolve("slow", "hangs.example", 80, timeout=5)
    assert time.monotonic() - started < 2, "refused once no place freed within a second, not at the timeout"
    assert lookups.resolve("other", "127.0.0.1", 80, timeout=5), "another tenant is not held up"

    answer.set()  # the name servers answer at last: the tenant's places are free again
    deadline = time.monotonic() + 5
    while True:
        try:
            lookups.resolve("slow", "hangs.example", 80, timeout=5)
        except LookupRefused:  # the two hung lookups are still ending
            assert time.monotonic() < deadline, "the hung lookups never gave their places back"
            time.sleep(0.01)
        except socket.gaierror:  # looked up again, and answered
            break


def test_a_burst_of_one_tenants_lookups_waits_for_places_instead_of_being_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two places per tenant: ten creates at once, each lookup a few milliseconds, all go through."""
    real = socket.getaddrinfo

    def a_little_slow(host: str, *args: Any, **kwargs: Any) -> Any:
        time.sleep(0.02)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", a_little_slow)
    lookups = HostLookups(per_tenant=2)
    found: list[Any] = []
    burst = [
        threading.Thread(target=lambda: found.append(lookups.resolve("busy", "127.0.0.1", 80, timeout=5)))
        for _ in range(10)
    ]
    for thread in burst:
        thread.start()
    for thread in burst:
        thread.join()

    assert len(found) == 10 and all(found)
