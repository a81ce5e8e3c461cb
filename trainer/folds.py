"""Cross-fitting's fold models, trained in processes of their own beside the final model.

Data too small for a validation split is scored by ``cross_fit_folds`` models, each trained on
the other folds (trainer.held_out). They need nothing the final model learns, so they
start before it and train while the caller trains the final model. Such data trains with one
learner (K = 1: a core's work), and before this the six trainings ran one after another while
the node's other cores idled.

Up to one process per core (``processes``) starts at once, each taking every n-th fold. They
come from the trainer's fork server (``trainer.processes``, which the learner processes
share), which imports the trainer once per worker process and forks every fold process
after that from the loaded interpreter: nothing inherited from the caller (no threads, no
CUDA state), nothing imported again. A process runs one intra-op thread, like
every learner, sends each fold's result through a pipe of its own, and exits. It needs no
watch on its parent: its work is bounded by the fixed update budget, and a result sent to a
parent that died fails on the closed pipe. Closing the runs (the caller's stop, an error)
terminates the processes that are still training; a terminated process unwinds, so that its
fold's temporary directory is removed (it stayed in the temporary folder on every cancel).
"""

from __future__ import annotations

import pickle
import signal
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import Any, Generic, TypeVar

import torch

from trainer.errors import TrainerError, TrainingStopped
from trainer.processes import trainer_context

T = TypeVar("T")
_POLL_S = 0.05  # how often a wait for the folds asks should_stop


class FoldRuns(Generic[T]):
    """``run(fold)`` for every fold in ``range(folds)``, in up to ``processes`` processes
    started now; :meth:`results` collects them. ``run`` must be picklable (a module-level
    function, or a ``functools.partial`` of one)."""

    def __init__(self, run: Callable[[int], T], folds: int, processes: int) -> None:
        ctx = trainer_context()
        self.folds = folds
        self.procs: list[Any] = []
        self.conns: list[Connection] = []
        self.ended: set[int] = set()  # the processes whose pipe closed: exiting of their own accord
        count = max(1, min(processes, folds))
        for rank in range(count):
            receive, send = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=_fold_process,
                args=(send, run, list(range(rank, folds, count))),
                name=f"taas-folds-{rank}",
                daemon=True,
            )
            proc.start()
            send.close()  # the child's end: EOF here once the child exits
            self.procs.append(proc)
            self.conns.append(receive)

    def results(self, should_stop: Callable[[], bool]) -> list[T]:
        """Every fold's result, in fold order. Asks ``should_stop`` every 50 ms while it waits:
        when true, terminates the processes and raises TrainingStopped (the caller fills in its
        updates and checkpoint). A fold's exception is raised here; a process that dies before
        sending all its folds' results is a TrainerError."""
        found: dict[int, T] = {}
        open_conns = list(self.conns)
        try:
            while open_conns:
                if should_stop():
                    raise TrainingStopped(0, None)
                for conn in wait(open_conns, timeout=_POLL_S):
                    assert isinstance(conn, Connection)
                    try:
                        fold, outcome, failed = conn.recv()
                    except EOFError:  # the process is exiting: all its folds were sent, or it died
                        open_conns.remove(conn)
                        self.ended.add(self.conns.index(conn))
                        continue
                    if failed:
                        raise outcome
                    found[fold] = outcome
        finally:
            self.close()  # joins the processes: their exit codes are known after
        missing = sorted(set(range(self.folds)) - set(found))
        if missing:
            codes = [proc.exitcode for proc in self.procs]
            raise TrainerError(
                f"cross-fitting: a fold process died before folds {missing} (exit codes {codes})"
            )
        return [found[fold] for fold in range(self.folds)]

    def close(self) -> None:
        """Terminate the processes still training, wait for every process's end, and release
        the pipes."""
        for rank, proc in enumerate(self.procs):
            if rank not in self.ended and proc.is_alive():
                proc.terminate()
            proc.join()
        for conn in self.conns:
            conn.close()


def _fold_process(conn: Connection, run: Callable[[int], Any], folds: list[int]) -> None:
    """A fold process's main: each of ``folds``' result (or exception) through ``conn``."""
    torch.set_num_threads(1)
    signal.signal(signal.SIGTERM, _unwind)
    for fold in folds:
        try:
            message = (fold, run(fold), False)
        except Exception as exc:  # raised again in the caller, as itself where it pickles
            message = (fold, _picklable(exc), True)
        try:
            conn.send(message)
        except (BrokenPipeError, OSError):  # the caller is gone
            return
        if message[2]:
            return
    conn.close()


def _unwind(signum: int, _frame: object) -> None:
    """SIGTERM (:meth:`FoldRuns.close`) as SystemExit, which no ``except Exception`` catches:
    the fold's ``with`` blocks run their exits, its temporary directory's included."""
    raise SystemExit(128 + signum)


def _picklable(exc: Exception) -> Exception:
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return TrainerError(f"cross-fitting: {type(exc).__name__}: {exc}")
    return exc
