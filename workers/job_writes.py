"""One claim's writes to its job row, and what a database that cannot be reached for a while
(a restart, a failover) does to them.

Every write carries the lease's epoch, and a write with an old epoch is refused. A write made
while training (progress, the checkpoint pointer, a resume) costs nothing when it misses:
training goes on, the caller writes it again later, and the lease keeper gives the lease up if
the outage outlasts it (``unless_unreachable``). The finish, a release or a failure is tried
again until it lands or the lease is lost (``until_landed``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeVar

from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session, sessionmaker

from workers.lease import LeaseKeeper

log = logging.getLogger(__name__)
T = TypeVar("T")
# What a database that cannot be reached for a while raises (a restart, a failover, a full
# connection pool, SQLite's lock held too long).
UNREACHABLE = (OperationalError, InterfaceError, PoolTimeout)


class JobWrites:
    """The writes of the claim of job ``job_id`` whose lease lasts ``lease_seconds``."""

    def __init__(self, job_id: str, sessions: sessionmaker[Session], lease_seconds: float) -> None:
        self.job_id = job_id
        self.sessions = sessions
        self.lease_seconds = lease_seconds

    def unless_unreachable(self, what: str, write: Callable[[Session], bool]) -> bool | None:
        """A fenced write made while training; None, logged, when the database cannot be
        reached (the caller writes it again later: training goes on meanwhile, and the lease
        keeper gives the lease up if the outage outlasts it)."""
        try:
            with self.sessions() as session:
                return write(session)
        except UNREACHABLE as error:
            log.warning("job %s: %s not recorded, the database is unreachable: %s", self.job_id, what, error)
            return None

    def until_landed(self, what: str, write: Callable[[Session], T], keeper: LeaseKeeper | None) -> T:
        """A fenced write after training (the finish, a release, a failure), tried again while
        the database cannot be reached, for as long as the lease holds; the last error once it
        is lost, or at once before the lease keeper runs. (The error escaped at once: a blip of
        seconds cost the attempt, and three of them Failed the job, "its worker stopped
        responding".)"""
        pause, deadline = 0.5, time.monotonic() + self.lease_seconds
        while True:
            try:
                with self.sessions() as session:
                    return write(session)
            except UNREACHABLE as error:
                # a lease's time at most: an OperationalError that is no outage (a statement
                # timeout, PostgreSQL's full disk) while the renewals succeed would loop for ever
                if keeper is None or keeper.lost or time.monotonic() > deadline:
                    raise
                log.warning(
                    "job %s: %s not recorded, the database is unreachable (%s); again in %.1f s",
                    self.job_id,
                    what,
                    error,
                    pause,
                )
                time.sleep(pause)
                pause = min(pause * 2, 5.0)


def utc_now() -> datetime:
    """The time a write to the job row carries."""
    return datetime.now(UTC)
