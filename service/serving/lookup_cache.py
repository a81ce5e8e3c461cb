"""An in-process cache of classify lookups (key → tenant and rate, classifier → model), kept
exact by invalidation messages.

The classify hot path would otherwise ask the database, on a worker thread, for the caller's
key and the classifier it names on every call. An entry is used only while the cache is
*usable*: its :class:`service.serving.invalidation.Invalidations` listener is subscribed and has heard
from Redis within ``stale_after_s`` (so a replica cut off from Redis never trusts what it may
have missed) — and, as the bound for an invalidation whose publish failed, only for
``max_age_s`` after it was read from the database.

Only what cannot change without an invalidation is cached: an active key together with an
Available classifier of its tenant. Every change to a key, a tenant's quota or a classifier
that classify reads must call ``Invalidations.announce(tenant_id)`` after its commit.

A lookup that raced an invalidation must not store what it read before it: readers take
:meth:`LookupCache.generation` before querying and :meth:`put` drops the entry if any
invalidation (or reconnect) happened since.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict

from service.core.models import ClassifierStatus
from service.serving.classifying import ServingLookup

_AVAILABLE = ClassifierStatus.AVAILABLE.value


class LookupCache:
    """(key digest, classifier id) → :class:`ServingLookup`, bounded, invalidated per tenant."""

    def __init__(
        self, *, max_age_s: float = 10.0, stale_after_s: float = 1.0, max_entries: int = 65_536
    ) -> None:
        self.max_age_s = max_age_s
        self.stale_after_s = stale_after_s
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[str, str], tuple[ServingLookup, float]] = OrderedDict()
        self._generation = 0
        self._heard_at = -math.inf
        self._lock = threading.Lock()

    def usable(self) -> bool:
        """Whether entries may be served: the listener heard from Redis within ``stale_after_s``."""
        return time.monotonic() - self._heard_at < self.stale_after_s

    def heard(self) -> None:
        """The listener heard from Redis (a message or its own ping's reply)."""
        self._heard_at = time.monotonic()

    def lost(self) -> None:
        """The listener lost Redis: serve nothing from here until it resubscribes."""
        self._heard_at = -math.inf
        self.clear()

    def get(self, digest: str, classifier_id: str) -> ServingLookup | None:
        """The cached lookup, or None (not cached, too old, or the cache is not usable now)."""
        if not self.usable():
            return None
        entry = self._entries.get((digest, classifier_id))
        if entry is None:
            return None
        found, read_at = entry
        if time.monotonic() - read_at > self.max_age_s:
            return None
        return found

    def generation(self) -> int:
        """Take before reading the database; pass to :meth:`put`."""
        return self._generation

    def put(self, digest: str, classifier_id: str, found: ServingLookup, generation: int) -> None:
        """Remember ``found`` if it may be cached (an Available classifier) and nothing was
        invalidated since ``generation`` was taken."""
        servable = found.classifier
        if servable is None or servable.status != _AVAILABLE or not servable.model_dir:
            return
        with self._lock:
            if generation != self._generation or not self.usable():
                return
            self._entries[(digest, classifier_id)] = (found, time.monotonic())
            self._entries.move_to_end((digest, classifier_id))
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def forget_tenant(self, tenant_id: str) -> None:
        """Drop every entry of ``tenant_id`` (its keys, quota or classifiers changed)."""
        with self._lock:
            self._generation += 1
            for key in [k for k, (found, _) in self._entries.items() if found.tenant_id == tenant_id]:
                del self._entries[key]

    def clear(self) -> None:
        """Drop every entry (the listener (re)subscribed or lost Redis)."""
        with self._lock:
            self._generation += 1
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
