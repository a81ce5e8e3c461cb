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
import os
from multiprocessing import forkserver, process
from multiprocessing.context import ForkServerContext
from pathlib import Path

_PRELOAD = ["trainer.engine"]
SEMAPHORE_PREFIX = "mp-taas"  # /dev/shm/sem.mp-taas-<pid of the creating process>-<random>
_SHM = Path("/dev/shm")


def trainer_context() -> ForkServerContext:
    """The fork server's context, with the trainer as its preload (read when the server starts).
    The semaphores this process makes from now on carry its pid in their names."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    _name_semaphores_after_this_process()
    return ctx


def _name_semaphores_after_this_process() -> None:
    # The learners' locks and semaphores are named POSIX semaphores (/dev/shm/sem.*): a learner
    # forked from the fork server opens them by name. Their names are multiprocessing's
    # "<semprefix>-<random>" (synchronize.SemLock._make_name; semprefix "/mp", kept in the
    # process's _config, with no public setter). multiprocessing's resource tracker unlinks
    # them when their process dies, unless it dies too: a training killed with its whole tree
    # (kill -9 of its process group, the OOM killer, a container stopped hard) left them for
    # ever. Named after their process, they are found by sweep_orphaned_semaphores.
    process.current_process()._config["semprefix"] = f"/{SEMAPHORE_PREFIX}-{os.getpid()}"  # type: ignore[attr-defined]


def sweep_orphaned_semaphores(shm: Path = _SHM) -> int:
    """Unlink the trainer's named semaphores whose creating process has gone (a training killed
    with its whole tree, resource tracker included); returns how many went. Run as each pool of
    learners starts (``trainer.ps.pool.ProcessPool``)."""
    swept = 0
    for entry in shm.glob(f"sem.{SEMAPHORE_PREFIX}-*"):
        pid = entry.name.removeprefix(f"sem.{SEMAPHORE_PREFIX}-").partition("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            try:
                entry.unlink()
                swept += 1
            except FileNotFoundError:  # another pool swept it first
                continue
    return swept


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: not ours to sweep
        return True
    return True


def start_fork_server() -> None:
    """Start the fork server now unless it runs: it imports the trainer in the background
    while the caller goes on (featurising, say), and the first process asked of it waits only
    for what is left of that."""
    trainer_context()
    forkserver.ensure_running()
