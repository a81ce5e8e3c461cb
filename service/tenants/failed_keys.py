"""Refusing, for a while, a client address that keeps presenting wrong keys.

An unknown key costs a database lookup on a worker thread before it can be refused. A flood of
made-up keys from one address took the threads that look up other tenants' keys and load their
models (another tenant's classify p50 went from 4 to 40 ms), and a wrong-key flood is also how
a short operator-chosen admin key would be guessed. So each address may present ``burst`` wrong
keys at once, then one every ``1 / per_second`` seconds; past that, its requests that need a key
looked up are refused with 429 and ``Retry-After`` before any lookup. A request whose key is
already known (a classify answered from the lookup cache, the admin key) is never held up.

The counts are per API process (each replica keeps its own: with N replicas an address gets N
times the rate) and bounded: the ``max_addresses`` addresses that failed most recently are
kept. An IPv6 address counts by its /64, which a host is commonly given whole. Behind a reverse
proxy the address is the one the proxy forwards (uvicorn's ``proxy_headers``, trusted from
``FORWARDED_ALLOW_IPS``, 127.0.0.1 by default); a proxy that forwards none makes every client
one address, and a flood then holds up every key still to be looked up.
"""

from __future__ import annotations

import ipaddress
import math
import threading
import time
from collections import OrderedDict

from starlette.requests import HTTPConnection

from service.core.errors import TooManyWrongKeys


class FailedKeys:
    """Per-address counts of wrong keys: a GCRA bucket each (one theoretical-arrival time)."""

    def __init__(self, *, burst: int, per_second: float, max_addresses: int = 100_000) -> None:
        self.burst, self.per_second, self.max_addresses = burst, per_second, max_addresses
        self._interval = 1.0 / per_second
        self._tolerance = burst * self._interval
        self._due: OrderedDict[str, float] = OrderedDict()  # address -> theoretical arrival
        self._lock = threading.Lock()

    def check(self, connection: HTTPConnection) -> None:
        """Raise TooManyWrongKeys while the request's address may present no more wrong keys."""
        address = client_address(connection)
        with self._lock:
            due = self._due.get(address)
        if due is None:
            return
        wait = due + self._interval - self._tolerance - time.monotonic()
        if wait > 0:
            raise TooManyWrongKeys(self.burst, self.per_second, max(1, math.ceil(wait)))

    def failed(self, connection: HTTPConnection) -> None:
        """Count a wrong key presented from the request's address."""
        address = client_address(connection)
        now = time.monotonic()
        with self._lock:
            self._due[address] = max(self._due.pop(address, now), now) + self._interval
            while len(self._due) > self.max_addresses:
                self._due.popitem(last=False)


def client_address(connection: HTTPConnection) -> str:
    """The address a request counts under: its client's, an IPv6 one by its /64."""
    host = connection.client.host if connection.client else ""
    try:
        parsed = ipaddress.ip_address(host)
    except ValueError:
        return host  # not an IP address (a test client, a Unix socket)
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.ip_network(f"{parsed}/64", strict=False))
    return str(parsed)
