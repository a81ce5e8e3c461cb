"""Callback URLs of status webhooks, and the guard that keeps taas from being an SSRF proxy.

A callback URL must be http(s), carry no credentials, and its host must resolve only to public
addresses: loopback, link-local (cloud metadata at 169.254.169.254), private, shared, unspecified,
multicast and reserved ones are refused, IPv4 inside IPv6 (``::ffff:127.0.0.1``, 6to4, NAT64)
included, unless the operator sets ``TAAS_WEBHOOK_ALLOW_PRIVATE``. The host is resolved when the
URL is accepted and again at every delivery, and the delivery connects to the very address that
was checked (:class:`Destination`), so a DNS answer that changes in between (rebinding) gains
nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address, IPv6Network, ip_address
from urllib.parse import urlsplit, urlunsplit

from service.webhooks.host_lookups import LOOKUPS, LookupRefused

MAX_URL_CHARS = 2048
_NAT64 = IPv6Network("64:ff9b::/96")
_NOT_PUBLIC = ("unspecified", "loopback", "link_local", "multicast", "reserved", "private")


class UnsafeCallback(ValueError):
    """A callback URL taas will not call; the message says why (for "callback_url <message>")."""


@dataclass(frozen=True)
class Destination:
    """Where a delivery goes: ``urls`` name the checked addresses instead of the host, to try in
    turn (a receiver whose first address, an IPv6 one say, takes no connection is reached at
    the next), ``host`` is the Host header to send and ``server_name`` the name TLS verifies
    (https only)."""

    urls: tuple[str, ...]
    host: str
    server_name: str | None


def check_callback_url(url: str, *, allow_private: bool, tenant_id: str, timeout: float) -> Destination:
    """Check ``url`` and resolve its host to the addresses to connect to, within ``timeout``
    seconds and among ``tenant_id``'s few lookups in flight (service.webhooks.host_lookups: the create
    that checks a URL holds a database connection, and a webhook attempt one of the worker's
    threads).

    Raises UnsafeCallback when the URL is malformed, not http(s), carries credentials, its host
    does not resolve (or not in time), or (unless ``allow_private``) any address it resolves to
    is not public.
    """
    if len(url) > MAX_URL_CHARS:
        raise UnsafeCallback(f"must be at most {MAX_URL_CHARS} characters")
    if any(ch.isspace() or not ch.isprintable() for ch in url):  # a NUL would cut the host short
        raise UnsafeCallback("must not contain spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port if parts.port is not None else 443 if parts.scheme == "https" else 80
    except ValueError:
        raise UnsafeCallback("is not a valid URL") from None
    if parts.scheme not in ("http", "https"):
        raise UnsafeCallback("must be an http:// or https:// URL")
    if not parts.hostname:
        raise UnsafeCallback("has no host")
    if port == 0:  # urlsplit allows it; nothing can be reached there
        raise UnsafeCallback("has port 0")
    if parts.username is not None or parts.password is not None:
        raise UnsafeCallback("must not carry credentials")
    # the host as DNS, the Host header and TLS's server name carry it: ASCII (IDNA), so that a
    # host written in other characters ("bücher.de", full-width digits) sends a valid header;
    # its Unicode form failed every delivery (httpx encodes headers as ASCII)
    try:
        host = parts.hostname.encode("idna").decode("ascii")
    except UnicodeError:
        raise UnsafeCallback(f"host '{parts.hostname}' is not a valid host name") from None
    try:
        found = LOOKUPS.resolve(tenant_id, host, port, timeout)
    except LookupRefused as refused:
        raise UnsafeCallback(f"host '{parts.hostname}' could not be looked up: {refused}") from None
    except OSError:
        raise UnsafeCallback(f"host '{parts.hostname}' does not resolve") from None
    addresses = list(dict.fromkeys(ip_address(str(info[4][0]).split("%", 1)[0]) for info in found))
    if not allow_private:
        for address in addresses:
            if reason := not_public(address):
                raise UnsafeCallback(
                    f"host '{parts.hostname}' resolves to {address}, a {reason} address "
                    "(taas calls only public addresses)"
                )
    named = f"[{host}]" if ":" in host else host
    return Destination(
        urls=tuple(
            urlunsplit((parts.scheme, f"{_literal(address)}:{port}", parts.path or "/", parts.query, ""))
            for address in addresses
        ),
        host=named if parts.port is None else f"{named}:{parts.port}",
        server_name=host if parts.scheme == "https" else None,
    )


def _literal(address: IPv4Address | IPv6Address) -> str:
    return f"[{address}]" if address.version == 6 else str(address)


def not_public(address: IPv4Address | IPv6Address) -> str | None:
    """Why ``address`` is no public internet address (e.g. "loopback"), or None if it is one."""
    if isinstance(address, IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in _NAT64:
            embedded = IPv4Address(address.packed[-4:])
        if embedded is not None:
            return not_public(embedded)
    for kind in _NOT_PUBLIC:
        if getattr(address, f"is_{kind}"):
            return kind.replace("_", "-")
    return None if address.is_global else "non-global"
