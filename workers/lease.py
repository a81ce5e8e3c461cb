"""LeaseKeeper: the heartbeat thread that keeps a worker's lease on its job alive.

It renews the lease every ``heartbeat`` seconds, independent of the trainer's steps (a slow
step, a long evaluation or a checkpoint write never lets the lease lapse), and turns ``lost``
true — which the trainer's ``should_stop`` polls after every update — as soon as either

* a renewal is refused: the job was requeued by the reconciler, claimed by another worker, or
  cancelled or deleted by its tenant (the fenced UPDATE matched no row); or
* no renewal has succeeded for a whole lease period (the database is unreachable): by then
  the reconciler may have handed the job to another worker, so this one must stop writing
  before it could overwrite anything. (Its writes would be refused anyway; stopping early only
  frees the worker.)

So a worker that loses its lease stops training within one heartbeat.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from service.training.jobs import JobLease
from service.training.leases import renew_lease

log = logging.getLogger(__name__)


class LeaseKeeper:
    """Renews ``lease`` in a daemon thread; use as a context manager around the training."""

    def __init__(
        self,
        lease: JobLease,
        sessions: Callable[[], Session],
        *,
        lease_seconds: float,
        heartbeat_seconds: float,
    ) -> None:
        self.lease = lease
        self._sessions = sessions
        self._duration = timedelta(seconds=lease_seconds)
        # Renew at least three times per lease period whatever the operator set, so that one
        # slow renewal never lets a live worker's lease lapse.
        self._every = min(heartbeat_seconds, lease_seconds / 3)
        self._lost = threading.Event()
        self._done = threading.Event()
        self._last_renewed = time.monotonic()  # the claim itself set the first expiry
        self._thread = threading.Thread(target=self._run, name=f"lease-{lease.job_id[:8]}", daemon=True)
        self.reason = ""

    @property
    def lost(self) -> bool:
        """True once the lease is lost; the worker must stop and write nothing more."""
        return self._lost.is_set()

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join(timeout=self._every + 30)

    def mark_lost(self, reason: str) -> None:
        """Declare the lease lost (a fenced write of the worker itself was refused)."""
        if not self._lost.is_set():
            self.reason = reason
            log.warning("job %s: lease lost: %s", self.lease.job_id, reason)
            self._lost.set()

    def _run(self) -> None:
        while not self._done.wait(self._every) and not self.lost:
            self._renew_once()

    def _renew_once(self) -> None:
        try:
            with self._sessions() as session:
                renewed = renew_lease(session, self.lease, now=datetime.now(UTC), duration=self._duration)
        except SQLAlchemyError as error:
            # The database is unreachable: keep trying until the lease would have expired.
            silent = time.monotonic() - self._last_renewed
            log.warning("job %s: renewal failed (%.0fs without one): %s", self.lease.job_id, silent, error)
            if silent >= self._duration.total_seconds():
                self.mark_lost(f"no renewal for {silent:.0f}s (database unreachable)")
            return
        if renewed:
            self._last_renewed = time.monotonic()
        else:
            self.mark_lost("renewal refused (requeued, taken over, cancelled or deleted)")
