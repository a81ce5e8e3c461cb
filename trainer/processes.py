"""Where the trainer's child processes come from: multiprocessing's fork server, holding the
trainer already imported.

Learner processes (``trainer.ps.pool.ProcessPool``) and cross-fitting's fold processes
(``trainer.folds``) fork from one fork server per calling process. The server imports
``trainer.engine`` (torch with it) once, about 1.6 s of CPU on the development machine, and
every process forked after that starts in milliseconds, inheriting nothing from the caller (no
threads, no CUDA state). A worker runs job after job in one process and starts the server
before its first job (workers/__main__.py), so no job waits for that import. Spawned learners
(until the twenty-third session) imported torch again, each of them, for every job: on 2 cores
a one-epoch snips job at K = 2 took 2.4-2.6 s spawned and 1.15-1.26 s forked from a running
server (docs/benchmarks.md).
"""

from __future__ import annotations

import multiprocessing as mp
from multiprocessing import forkserver
from multiprocessing.context import ForkServerContext

_PRELOAD = ["trainer.engine"]


def trainer_context() -> ForkServerContext:
    """The fork server's context, with the trainer as its preload (read when the server starts)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    return ctx


def start_fork_server() -> None:
    """Start the fork server now unless it runs: it imports the trainer in the background
    while the caller goes on (featurising, say), and the first process asked of it waits only
    for what is left of that."""
    trainer_context()
    forkserver.ensure_running()
