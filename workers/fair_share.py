"""Whether the job a worker trains should give its slot to a tenant holding fewer.

Dispatch hands each free slot to the tenant holding the fewest (service.training.scheduling), but a
tenant that arrives while another holds every slot would wait until one of its jobs ends.
So a training worker asks, every ``every_seconds``, whether its job should yield
(:func:`service.training.scheduling.should_yield`): then the trainer checkpoints, the job is queued
again (it resumes from that checkpoint, on whichever worker claims it next) and the worker
takes the fairest job, the waiting tenant's. Once true, the answer stays true.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from service.training.scheduling import should_yield

log = logging.getLogger(__name__)


class FairShare:
    """Asks the database at most every ``every_seconds`` whether job ``job_id`` should yield."""

    def __init__(self, sessions: Callable[[], Session], job_id: str, *, every_seconds: float) -> None:
        self._sessions, self._job_id, self._every = sessions, job_id, every_seconds
        self._next_check = time.monotonic() + every_seconds
        self.yielding = False

    def should_yield(self) -> bool:
        """True once the job should give its slot back; cheap between checks."""
        if self.yielding or time.monotonic() < self._next_check:
            return self.yielding
        self._next_check = time.monotonic() + self._every
        try:
            with self._sessions() as session:
                self.yielding = should_yield(session, self._job_id, now=datetime.now(UTC))
        except SQLAlchemyError as error:  # the lease keeper judges the database; this just waits
            log.warning("job %s: fair-share check failed: %s", self._job_id, error)
        if self.yielding:
            log.info("job %s: yields its slot to a tenant holding fewer", self._job_id)
        return self.yielding
