"""DNS lookups of callback hosts, each within a deadline, and few in flight per tenant.

``getaddrinfo`` cannot be cancelled: a host whose name servers do not answer holds its thread
for the resolver's retries (tens of seconds with search domains). A lookup past its deadline is
therefore left running, and it keeps its tenant's place until it ends. Without that bound one
tenant's stuck lookups filled the webhook worker's shared pool of eight resolver threads, and
every other tenant's attempts timed out behind them; and the API's create, which checks the
URL while it holds a database connection, let one tenant's fifteen slow creates hold every
connection of the process.
"""

from __future__ import annotations

import socket
import threading
from collections import Counter
from typing import Any

IN_FLIGHT_PER_TENANT = 2
IN_FLIGHT = 64  # threads left behind by the deadline, all tenants together

_AddressInfo = list[tuple[Any, ...]]


class LookupRefused(OSError):
    """The lookup did not run or did not end in time; the message says which."""


class HostLookups:
    """``resolve``: getaddrinfo on a thread of its own, waited for at most ``timeout`` seconds."""

    def __init__(self, per_tenant: int = IN_FLIGHT_PER_TENANT, in_flight: int = IN_FLIGHT) -> None:
        self.per_tenant, self.in_flight = per_tenant, in_flight
        self._lock = threading.Lock()
        self._running: Counter[str] = Counter()

    def resolve(self, tenant_id: str, host: str, port: int, timeout: float) -> _AddressInfo:
        """The stream addresses of ``host``; LookupRefused when ``tenant_id`` already has
        ``per_tenant`` lookups running (or all tenants ``in_flight``) or this one takes longer
        than ``timeout``; OSError when the host does not resolve."""
        with self._lock:
            if self._running[tenant_id] >= self.per_tenant:
                raise LookupRefused(
                    f"{self._running[tenant_id]} earlier lookups of this tenant's hosts are still running"
                )
            if self._running.total() >= self.in_flight:
                raise LookupRefused("too many lookups of callback hosts are still running")
            self._running[tenant_id] += 1
        outcome: list[_AddressInfo | OSError] = []
        done = threading.Event()

        def look_up() -> None:
            try:
                outcome.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
            except OSError as error:
                outcome.append(error)
            finally:
                with self._lock:
                    self._running[tenant_id] -= 1
                    if not self._running[tenant_id]:
                        del self._running[tenant_id]
                done.set()

        threading.Thread(target=look_up, name="callback-host-lookup", daemon=True).start()
        if not done.wait(timeout):
            raise LookupRefused(f"took longer than {timeout:g} s")
        found = outcome[0]
        if isinstance(found, OSError):
            raise found
        return found


LOOKUPS = HostLookups()  # one per process: the API's checks, or the webhook worker's attempts
