"""How many learners a training runs: the cores this process may use, fewer for small data."""

from __future__ import annotations

import os

MIN_STEPS_PER_LEARNER = 32  # auto K gives each learner at least this many steps per epoch


def default_learners() -> int:
    """The most learners auto (K = 0) uses: the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def auto_learners(steps_per_epoch: int) -> int:
    """K for ``learners=0``: one per core, but no more than the data keeps busy.

    Every epoch ends in a round barrier (validation, early stopping) that every learner
    waits at, and learner processes cost their start (forks of the trainer's fork server,
    whose own start imports the trainer once per worker); a data set of a few dozen rows
    (a handful of steps per epoch) trains faster in-process than split across cores.
    """
    return max(1, min(default_learners(), steps_per_epoch // MIN_STEPS_PER_LEARNER))
