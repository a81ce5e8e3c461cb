"""A learner: compute a gradient against the shared parameters, push it, repeat.

``Learner.step`` is one mini-batch (pull, forward/backward, push), the same code in a
learner process, a CUDA stream and the K = 1 in-process path. ``run_shard`` walks a
learner's shard of one epoch from a position; ``learner_entry`` receives the server once the
process is forked and ``learner_process`` is a learner process's main loop:
wait for the supervisor's go, run the shard until done or asked to park, park, repeat.
Learners never print; they report through their counter row.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from trainer.features import Bags
from trainer.ps import counters as C
from trainer.ps.applier import Gradient, PSHandles, Stopped
from trainer.ps.server import ParameterServer


class Task(Protocol):
    """How a learner computes gradients for one model (see trainer.step.TextClassifierTask)."""

    def attach(self, params: list[torch.Tensor]) -> None: ...

    def pull(self, batch: Any) -> tuple[Any, int]: ...

    def compute(self, pulled: Any, batch: Any) -> tuple[float, Gradient]: ...


class Learner:
    """Learner ``rank`` of a server: one ``step`` per mini-batch, timed into its counter row."""

    def __init__(self, ps: ParameterServer, task: Task, rank: int) -> None:
        self.ps = ps
        self.task = task
        self.rank = rank
        self.mine = ps.counters.learner(rank)
        task.attach(ps.params)

    def step(self, batch: Any, samples: int, position: int) -> float:
        """Compute and push one gradient; returns the loss. A non-finite loss is not pushed.

        Raises Stopped if the session stops (or pauses) while the learner waits at the
        staleness bound or for its slot.
        """
        mine = self.mine
        base_version = self.ps.start_gradient(self.rank)  # before the pull: never undercounted
        try:
            start = time.perf_counter_ns()
            pulled, pulled_bytes = self.task.pull(batch)
            pulled_at = time.perf_counter_ns()
            loss, grad = self.task.compute(pulled, batch)
            mine[C.PULL_NS] += pulled_at - start
            mine[C.BYTES_PULLED] += pulled_bytes
            mine[C.COMPUTE_NS] += time.perf_counter_ns() - pulled_at
            mine[C.STEPS] += 1
            if math.isfinite(loss):
                self.ps.push(self.rank, grad, base_version, position, samples)
            return loss
        finally:
            self.ps.end_gradient(self.rank)


@dataclass
class ShardData:
    """Training rows in shared tensors (bags in EmbeddingBag layout and integer targets)."""

    ids: torch.Tensor
    weights: torch.Tensor
    offsets: torch.Tensor
    targets: torch.Tensor

    @classmethod
    def of(cls, bags: Bags, targets: np.ndarray, shared: bool) -> ShardData:
        tensors = [
            torch.from_numpy(np.ascontiguousarray(a)) for a in (bags.ids, bags.weights, bags.offsets, targets)
        ]
        if shared:
            tensors = [t.share_memory_() for t in tensors]
        return cls(*tensors)

    def bags(self) -> Bags:
        return Bags(self.ids.numpy(), self.weights.numpy(), self.offsets.numpy())


CHUNK_BATCHES = 32  # mini-batches whose bags one Bags.select gathers (see batches)


def run_shard(
    learner: Learner,
    bags: Bags,
    targets: np.ndarray,
    shard: np.ndarray,
    start: int,
    batch_size: int,
    losses: np.ndarray,
    should_park: Callable[[], bool],
    device: torch.device | None = None,
) -> int:
    """Train on ``shard[start:]`` until it ends or ``should_park()``; returns the new position.

    The position moves only after a completed push, so a position is always "everything
    before it was pushed". Adds each loss to ``losses`` ([sum, count]); a non-finite loss
    stops the walk at the batch that produced it (and is left in ``losses`` for the caller).
    """
    position = start
    for batch, end in batches(bags, targets, shard, start, batch_size):
        loss = learner.step(batch if device is None else batch.to(device), end - position, end)
        if not math.isfinite(loss):
            losses[0], losses[1] = loss, -1
            return position
        position = end
        losses[0] += loss
        losses[1] += 1
        if should_park():
            break
    return position


def batches(
    bags: Bags,
    targets: np.ndarray,
    shard: np.ndarray,
    start: int,
    batch_size: int,
    chunk: int = CHUNK_BATCHES,
) -> Iterator[tuple[Any, int]]:
    """The mini-batches of ``shard[start:]``, each with the shard position after it.

    The bags of ``chunk`` mini-batches are gathered by one ``Bags.select`` and sliced from it
    without a copy: a select has a fixed cost of some 20 numpy calls, half the time of
    assembling a mini-batch of 16 on the 2-core machine.
    """
    from trainer.step import Batch  # the production model's batch (trainer.step imports us)

    for first in range(start, len(shard), chunk * batch_size):
        rows = shard[first : first + chunk * batch_size]
        gathered, gathered_targets = bags.select(rows), targets[rows]
        for begin in range(0, len(rows), batch_size):
            stop = min(begin + batch_size, len(rows))
            yield Batch.of(gathered.slice(begin, stop), gathered_targets[begin:stop]), first + stop


def learner_entry(
    conn: Any, rank: int, apply_lock: Any, publish: list[Any], stripes: list[Any], go: Any, parked: Any
) -> None:
    """A learner process's first act: receive the server's tensors, the task and the data
    through ``conn``, then run.

    The locks come as process arguments (multiprocessing lets them travel only then); the
    tensors come through the pipe, as shared memory (torch's reductions). The supervisor
    sends nothing else through it, so ``conn`` turning readable means its end closed: the
    supervisor closed the pool or died. That is the learner's watch on it: the process's
    parent is the trainer's fork server (trainer.processes), which only exits once every
    process it forked has, so a changed parent would never show the supervisor's death.
    """
    try:
        handles, task, data, learners, batch_size, seed = conn.recv()
    except EOFError:  # the supervisor died (or gave up) before sending
        return
    handles.apply_lock = apply_lock
    handles.slots.publish = publish
    handles.stripes = stripes
    learner_process(handles, task, data, rank, learners, batch_size, seed, go, parked, conn.poll)


def learner_process(
    handles: PSHandles,
    task: Task,
    data: ShardData,
    rank: int,
    learners: int,
    batch_size: int,
    seed: int,
    go: Any,
    parked: Any,
    supervisor_gone: Callable[[], bool],
) -> None:
    """A learner process's main: wait for go, run the commanded shard, park; until STOP or
    ``supervisor_gone()``."""
    from trainer.step import DataCursor

    torch.set_num_threads(1)
    torch.manual_seed(seed + rank)
    ps = ParameterServer(handles)
    learner = Learner(ps, task, rank)
    mine, server = learner.mine, ps.server
    losses = handles.extra["losses"].numpy()[rank]
    bags, targets = data.bags(), data.targets.numpy()
    while True:
        while not go.acquire(timeout=1.0):
            if supervisor_gone():  # never outlive it
                return
        if server[C.STOP] or supervisor_gone():
            return
        shard = DataCursor(epoch=int(mine[C.EPOCH]), seed=seed).shard(len(targets), rank, learners)
        shard = shard[: int(mine[C.END])]
        try:
            position = run_shard(
                learner,
                bags,
                targets,
                shard,
                int(mine[C.START]),
                batch_size,
                losses,
                # Park on PAUSE or STOP; stop at once if the supervisor died (SIGKILL).
                lambda: bool(server[C.PAUSE] or server[C.STOP]) or supervisor_gone(),
            )
        except Stopped:
            position = -1
        if losses[1] < 0:
            mine[C.DONE] = 2
        elif position >= len(shard):
            mine[C.DONE] = 1
        mine[C.PARKED] = 1  # everything this learner pushed is READY or applied by now
        parked.release()
