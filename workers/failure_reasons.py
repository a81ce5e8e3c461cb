"""What a failed training attempt tells the tenant, and which failures wait for the operators.

The job row's reason is the tenant's to read: it names no server path. A failure for want of
something only the operators can give back (disk space, a remote artifact store that answers)
is no fault of the job: the attempt waits and tries again without counting (``waits_for``).
"""

from __future__ import annotations

import errno
from collections.abc import Iterator

from service.storage.base import StoreUnavailable
from trainer.errors import InvalidTrainingData, NonFiniteLoss, TrainerError, WeightsOutOfBounds

GENERIC_FAILURE = "Training failed because of an internal error; the operators have the details."
IO_FAILURE = (
    "Training could not read or write its files (for example a full or read-only disk); "
    "the operators have the details."
)
DISK_FULL = (
    "Training is waiting for disk space on its worker (the operators have the details); it "
    "tries again every few minutes, and this does not count as a failed attempt."
)
STORE_UNAVAILABLE = (
    "Training is waiting for the artifact store, which does not answer (the operators have the "
    "details); it tries again every few minutes, and this does not count as a failed attempt."
)
MISSING_DATA = (
    "Training could not find its training data in the worker's artifact store (the API and "
    "every worker must share it); the operators have the details."
)


def waits_for(error: BaseException) -> tuple[str, str] | None:
    """What an attempt that failed for want of something only the operators can give back
    waits for, as (the log's words, the tenant's reason); None for a failure of the attempt
    itself. Found anywhere in ``error``'s chain: a full disk or quota, or a remote artifact
    store that does not answer (three attempts a few seconds apart used to fail the job, while
    an operator had barely been paged)."""
    for seen in _chain(error):
        if isinstance(seen, StoreUnavailable):
            return "the artifact store is unavailable", STORE_UNAVAILABLE
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return "the disk is full", DISK_FULL
    return None


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error`` and the errors it was raised from (or during), newest first."""
    seen: BaseException | None = error
    chain: set[int] = set()
    while seen is not None and id(seen) not in chain:
        yield seen
        chain.add(id(seen))
        seen = seen.__cause__ or seen.__context__


def tenant_reason(error: TrainerError) -> str:
    """The reason a job failed by ``error`` gives its tenant."""
    if isinstance(error, InvalidTrainingData):
        return f"Invalid training data: {error}"
    if isinstance(error, NonFiniteLoss):
        return "Training diverged (the loss became infinite or NaN); check the training data."
    if isinstance(error, WeightsOutOfBounds):
        return "Training diverged (its weights grew too large to serve); check the training data."
    return GENERIC_FAILURE  # checkpoint and engine errors name server paths: keep them in the log
