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
import time
from collections import Counter
from typing import Any

IN_FLIGHT_PER_TENANT = 2
IN_FLIGHT = 64  # threads left behind by the deadline, all tenants together
# How long a lookup waits for a place: a burst of one tenant's creates queues behind its own
# lookups, which take milliseconds; behind hung ones, it is refused after this.
WAIT_FOR_PLACE_S = 1.0

_AddressInfo = list[tuple[Any, ...]]


class LookupRefused(OSError):
    """The lookup did not run or did not end in time; the message says which."""


class HostLookups:
    """``resolve``: getaddrinfo on a thread of its own, waited for at most ``timeout`` seconds."""

    def __init__(
        self,
        per_tenant: int = IN_FLIGHT_PER_TENANT,
        in_flight: int = IN_FLIGHT,
        wait_for_place: float = WAIT_FOR_PLACE_S,
    ) -> None:
        self.per_tenant, self.in_flight, self.wait_for_place = per_tenant, in_flight, wait_for_place
        self._places = threading.Condition()
        self._running: Counter[str] = Counter()

    def resolve(self, tenant_id: str, host: str, port: int, timeout: float) -> _AddressInfo:
        """The stream addresses of ``host``; LookupRefused when no place frees within
        ``wait_for_place`` (``tenant_id`` has ``per_tenant`` lookups running, or all tenants
        ``in_flight``) or the lookup takes longer than ``timeout``; OSError when the host does
        not resolve."""
        self._take_place(tenant_id, min(timeout, self.wait_for_place))
        outcome: list[_AddressInfo | OSError] = []
        done = threading.Event()

        def look_up() -> None:
            try:
                outcome.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
            except OSError as error:
                outcome.append(error)
            finally:
                with self._places:
                    self._running[tenant_id] -= 1
                    if not self._running[tenant_id]:
                        del self._running[tenant_id]
                    self._places.notify_all()
                done.set()

        threading.Thread(target=look_up, name="callback-host-lookup", daemon=True).start()
        if not done.wait(timeout):
            raise LookupRefused(f"took longer than {timeout:g} s")
        found = outcome[0]
        if isinstance(found, OSError):
            raise found
        return found

    def _take_place(self, tenant_id: str, patience: float) -> None:
        deadline = time.monotonic() + patience
        with self._places:
            while (
                full := self._running[tenant_id] >= self.per_tenant
            ) or self._running.total() >= self.in_flight:
                left = deadline - time.monotonic()
                if left <= 0:
                    if full:
                        running = self._running[tenant_id]
                        raise LookupRefused(
                            f"{running} earlier lookups of this tenant's hosts are still running"
                        )
                    raise LookupRefused("too many lookups of callback hosts are still running")
                self._places.wait(left)
            self._running[tenant_id] += 1


LOOKUPS = HostLookups()  # one per process: the API's checks, or the webhook worker's attempts
