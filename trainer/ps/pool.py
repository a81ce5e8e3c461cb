"""The learners of one session, in rounds: start them at their cursors, wait until all park.

A *round* starts every learner at (epoch, its position) and ends when every learner has
parked: at the end of its shard, or at the first step boundary after the supervisor raised
PAUSE (a checkpoint, a stop, a learner death). When a round ends, no learner holds a slot or
the apply role, the supervisor drains the READY slots, and every learner's committed cursor
equals the position after its last applied gradient: the state is consistent at one version.

``InProcessPool`` (K = 1) runs the single learner in the caller's process (no spawn, no
copy of anything: the plain loop's speed); ``ProcessPool`` (K > 1) forks K learner
processes once per session from the trainer's fork server, and drives them through
go/parked semaphores; ``trainer.ps.cuda.StreamPool`` runs them as CUDA streams, and
``trainer.ps.graph.GraphPool`` runs one CUDA learner as CUDA graphs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.multiprocessing.reductions import shared_cache

from trainer.errors import TrainerError
from trainer.processes import start_fork_server, sweep_orphaned_semaphores, trainer_context
from trainer.ps import counters as C
from trainer.ps.learner import Learner, ShardData, Task, learner_entry, run_shard
from trainer.ps.server import ParameterServer

MAX_RESPAWNS = 3  # learner deaths survived per session before the job fails (and resumes elsewhere)
# survivors must park this soon after PAUSE, and a round that applies no update and parks no
# learner for this long has a hung learner: the session fails either way
_PARK_TIMEOUT_S = 60.0
_TICK_S = 0.05


class SuspectState(TrainerError):
    """A learner died holding the apply role or mid-landing: the in-memory parameters may be
    half-updated."""


@dataclass
class RoundResult:
    """What a round left: each learner's committed position and done flag, the losses it saw."""

    positions: list[int]
    done: list[bool]
    loss_sum: float
    loss_count: int
    nonfinite: float | None  # a non-finite loss met by some learner (never pushed)


@contextmanager
def forgetting_freed_storages() -> Iterator[None]:
    """Run the block, then drop from torch's cache the storages this process shared and has
    freed since (a training's, once it has returned).

    Handing the learners their tensors (``ProcessPool.start``) records each shared storage in
    ``torch.multiprocessing.reductions.shared_cache`` under a weak reference, and torch drops
    the expired ones only when the cache passes 128 entries (a K = 2 training adds 16). Each
    expired entry keeps its storage's C++ object allocated, right after the heap block the
    tensor held before ``share_memory_()`` copied it to shared memory; glibc's memalign
    asks for more than that block (glibc bug 14581; 2.36 here), so no tensor of the same size
    reused it, and a worker grew by 16 to 24 MB at every K > 1 job of 2,000 rows until torch's
    sweep (docs/reliability.md).
    """
    try:
        yield
    finally:
        with shared_cache.lock:
            shared_cache.free_dead_references()


def _losses_tensor(learners: int, shared: bool) -> torch.Tensor:
    tensor = torch.zeros((learners, 2), dtype=torch.float64)
    return tensor.share_memory_() if shared else tensor


def _collect(ps: ParameterServer, losses: np.ndarray, shard_lengths: list[int]) -> RoundResult:
    positions = [int(ps.counters.learner(r)[C.CURSOR]) for r in range(len(shard_lengths))]
    nonfinite = next((float(row[0]) for row in losses if row[1] < 0), None)
    result = RoundResult(
        positions=positions,
        done=[p >= n for p, n in zip(positions, shard_lengths, strict=True)],
        loss_sum=float(losses[losses[:, 1] > 0, 0].sum()),
        loss_count=int(losses[losses[:, 1] > 0, 1].sum()),
        nonfinite=nonfinite,
    )
    losses[:] = 0.0
    return result


class InProcessPool:
    """K = 1: the learner runs in the supervisor's process; ``tick`` is called after every step."""

    def __init__(self, ps: ParameterServer, task: Task, data: ShardData, batch_size: int, seed: int) -> None:
        self.ps, self.data, self.batch_size, self.seed = ps, data, batch_size, seed
        self.learner = Learner(ps, task, 0)
        ps.handles.extra["losses"] = _losses_tensor(1, shared=False)
        self.losses = ps.handles.extra["losses"].numpy()
        self.bags, self.targets = data.bags(), data.targets.numpy()

    learners = 1

    def run_round(
        self, epoch: int, positions: list[int], ends: list[int], tick: Callable[[], bool]
    ) -> RoundResult:
        """Run from ``positions[0]`` until ``ends[0]`` or ``tick()`` asks to park."""
        from trainer.step import DataCursor

        shard = DataCursor(epoch=epoch, seed=self.seed).shard(len(self.targets), 0, 1)
        self.ps.counters.learner(0)[C.CURSOR] = positions[0]
        run_shard(
            self.learner,
            self.bags,
            self.targets,
            shard[: ends[0]],
            positions[0],
            self.batch_size,
            self.losses[0],
            tick,
        )
        self.ps.drain()  # nothing is READY with one learner; kept for the invariant's sake
        return _collect(self.ps, self.losses, [len(shard)])

    def close(self) -> None:
        """Nothing to stop."""


class ProcessPool:
    """K > 1 learner processes sharing the server; respawns a learner that dies off the apply role.

    Made as soon as K is known, before the data is featurised: it starts the fork server
    (``trainer.processes``), whose import of the trainer then overlaps the supervisor's
    preparation on a worker's first job; ``start`` forks the learners and hands each the
    server through a pipe.
    """

    def __init__(self, learners: int, stripes: int = 0) -> None:
        self.learners = learners
        self.ctx = trainer_context()
        sweep_orphaned_semaphores()  # of trainings killed with their whole tree, before making ours
        self.apply_lock = self.ctx.Lock()
        self.publish = [self.ctx.Lock() for _ in range(learners)]
        self.stripes = [self.ctx.Lock() for _ in range(stripes)]
        self.parked = self.ctx.Semaphore(0)
        self.go: list[Any] = [None] * learners
        self.procs: list[Any] = [None] * learners
        self.conns: list[Any] = [None] * learners
        self.respawns = 0
        self.started = False
        start_fork_server()

    def locks(self) -> tuple[Any, list[Any], list[Any]]:
        """The apply lock, publish locks and stripe locks the server must be created with."""
        return self.apply_lock, self.publish, self.stripes

    def start(self, ps: ParameterServer, task: Task, data: ShardData, batch_size: int, seed: int) -> None:
        """Hand every learner the server, its task and the data; they park, waiting for go."""
        self.ps, self.task, self.data, self.batch_size, self.seed = ps, task, data, batch_size, seed
        ps.handles.extra["losses"] = _losses_tensor(self.learners, shared=True)
        self.losses = ps.handles.extra["losses"].numpy()
        self.started = True
        for rank in range(self.learners):
            self._spawn(rank)
        for rank in range(self.learners):
            self._send(rank)

    def _spawn(self, rank: int) -> None:
        self.go[rank] = self.ctx.Semaphore(0)  # fresh: a dead learner's unconsumed go must not leak
        receive, self.conns[rank] = self.ctx.Pipe(duplex=False)
        proc = self.ctx.Process(
            target=learner_entry,
            args=(receive, rank, self.apply_lock, self.publish, self.stripes, self.go[rank], self.parked),
            name=f"taas-learner-{rank}",
            daemon=True,
        )
        proc.start()
        receive.close()
        self.procs[rank] = proc

    def _send(self, rank: int) -> None:
        self.ps.counters.learner(rank)[C.PARKED] = 1  # a new learner waits for go: it is parked
        payload = (self.ps.without_locks(), self.task, self.data, self.learners, self.batch_size, self.seed)
        self.conns[rank].send(payload)

    def run_round(
        self, epoch: int, positions: list[int], ends: list[int], tick: Callable[[], bool]
    ) -> RoundResult:
        """Start every learner at its position; return when all are parked (each at its
        ``ends`` position, or earlier when asked to park) and slots drained.

        ``tick()`` runs every ~50 ms meanwhile; when it returns true, PAUSE is raised so the
        learners park at their next step boundary. Raises SuspectState when a learner died
        holding the apply role, or when no update is applied and no learner parks for
        ``_PARK_TIMEOUT_S`` (a learner alive but hung: stopped, or blocked in the kernel; the
        round waited for it for ever, its lease renewed, and not even a cancel freed the
        worker), TrainerError after MAX_RESPAWNS deaths.
        """
        from trainer.step import DataCursor

        ps, server = self.ps, self.ps.server
        rows = len(self.data.targets)
        lengths = [
            len(DataCursor(epoch=epoch, seed=self.seed).shard(rows, r, self.learners))
            for r in range(self.learners)
        ]
        # Every learner is parked here, so the supervisor is the only writer of these fields.
        for rank in range(self.learners):
            mine = ps.counters.learner(rank)
            mine[C.EPOCH], mine[C.START], mine[C.CURSOR] = epoch, positions[rank], positions[rank]
            mine[C.END] = ends[rank]
            mine[C.DONE], mine[C.PARKED] = 0, 0
        server[C.PAUSE] = 0
        for go in self.go:
            go.release()
        last, moved = self._progress(), time.monotonic()
        while not self._all_parked():
            self.parked.acquire(timeout=_TICK_S)
            dead = [r for r, p in enumerate(self.procs) if p.exitcode is not None]
            if dead:
                self._recover(dead)
            elif not server[C.PAUSE] and ((self.losses[:, 1] < 0).any() or tick()):
                server[C.PAUSE] = 1
            if (now := self._progress()) != last:
                last, moved = now, time.monotonic()
            elif time.monotonic() - moved > _PARK_TIMEOUT_S:
                hung = [r for r in range(self.learners) if not self.ps.counters.learner(r)[C.PARKED]]
                raise SuspectState(
                    f"learners {hung} made no progress for {_PARK_TIMEOUT_S:g} s (hung: stopped, "
                    "or blocked in the kernel or on a device)"
                )
        ps.drain()
        return _collect(ps, self.losses, lengths)

    def _progress(self) -> tuple[int, int]:
        """Updates applied and learners parked: a round that moves neither is hung."""
        parked = sum(int(self.ps.counters.learner(r)[C.PARKED]) for r in range(self.learners))
        return int(self.ps.server[C.APPLIED]), parked

    def _all_parked(self) -> bool:
        return all(self.ps.counters.learner(r)[C.PARKED] for r in range(self.learners))

    def _recover(self, dead: list[int]) -> None:
        """A learner died: park the others, then respawn it or declare the state suspect."""
        self.respawns += len(dead)
        codes = {r: self.procs[r].exitcode for r in dead}
        server = self.ps.server
        server[C.DEATH] = 1  # before PAUSE: a survivor waiting for a stripe the dead held gives up
        server[C.PAUSE] = 1
        deadline = time.monotonic() + _PARK_TIMEOUT_S
        alive = [r for r in range(self.learners) if r not in dead]
        while not all(self.ps.counters.learner(r)[C.PARKED] for r in alive):
            if time.monotonic() > deadline or any(self.procs[r].exitcode is not None for r in alive):
                raise SuspectState(
                    f"learners {sorted(codes)} died (exit codes {codes}) and the others did not park"
                )
            self.parked.acquire(timeout=_TICK_S)
        if not self.ps.recover(dead):
            raise SuspectState(
                f"learner(s) {sorted(codes)} died holding the apply role or landing a gradient "
                f"(exit codes {codes})"
            )
        server[C.DEATH] = 0
        if self.respawns > MAX_RESPAWNS:
            raise TrainerError(f"learners died {self.respawns} times in one session (exit codes {codes})")
        for rank in dead:
            self._spawn(rank)  # it restarts at its committed cursor with the next round
            self._send(rank)

    def close(self) -> list[int | None]:
        """Stop every learner and wait for them; returns the exit codes of those forked
        (``start`` forks them)."""
        if self.started:
            self.ps.server[C.STOP] = 1
        forked = [rank for rank, proc in enumerate(self.procs) if proc is not None]
        for rank in forked:
            self.conns[rank].close()  # the learner sees EOF: the supervisor is done with it
            self.go[rank].release()
        for rank in forked:
            proc = self.procs[rank]
            proc.join(timeout=10)
            if proc.exitcode is None:
                proc.kill()
                proc.join(timeout=10)
        return [self.procs[rank].exitcode for rank in forked]
