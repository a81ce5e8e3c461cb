"""The CUDA learner pool: K learners as threads of one process, each on its own CUDA stream.

Why not K processes with CUDA IPC: at the small batches a service uses, a GPU step is bound
by kernel launches, and K processes mean K contexts and K launch queues time-sliced on one
GPU, which loses to one process (../shared/PERFORMANCE.md). Here the parameters, moments and
slot payloads live once in device memory and the learners are streams of one process, driven
through the same slot protocol and the same ParameterServer code (its locks work across
threads; its ``_sync`` orders the streams around slot hand-offs). One GPU (``cuda`` = the
current device); more GPUs would be one such process per GPU. tests/trainer/test_ps_cuda.py
passed on an H200 (thirteenth session) and skips without CUDA.

Against ../shared/PERFORMANCE.md's CUDA bar (one process replaying its step as a CUDA graph)
this path reaches 0.10-0.27 x at batch <= 16 on an H200, about one plain loop; K = 4 streams
measured best of 1, 2, 4 and 8 (benchmarks/ps_cuda_bench.py, docs/benchmarks.md). The host
is the limit: the learners' Python runs one thread at a time, and each step reads its loss.
So under SGD (the default) the engine runs one learner as CUDA graphs instead
(trainer.ps.graph); these streams serve Adam, whose lazy row update a graph cannot hold (its
rows are made unique, a size known only on the host), and K > 1 asked for by name.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch

from trainer.errors import TrainerError
from trainer.ps import counters as C
from trainer.ps.applier import Stopped
from trainer.ps.learner import Learner, ShardData, Task, run_shard
from trainer.ps.pool import RoundResult, _collect, _losses_tensor
from trainer.ps.server import ParameterServer

PER_GPU_LEARNERS = 4  # streams per GPU for learners=0 under Adam


def cuda_learners(optimizer: str) -> int:
    """K for learners=0 on CUDA: one graph learner under SGD (trainer.ps.graph), else streams."""
    return 1 if optimizer == "sgd" else PER_GPU_LEARNERS


class StreamPool:
    """K learner threads sharing one GPU; a round starts K threads and joins them."""

    def __init__(
        self,
        ps: ParameterServer,
        task_factory: Callable[[], Task],
        data: ShardData,
        batch_size: int,
        seed: int,
        device: torch.device,
    ) -> None:
        self.ps, self.data, self.batch_size, self.seed, self.device = ps, data, batch_size, seed, device
        self.learners = ps.counters.learners
        ps.handles.extra["losses"] = _losses_tensor(self.learners, shared=False)
        self.losses = ps.handles.extra["losses"].numpy()
        self.workers = [Learner(ps, task_factory(), r) for r in range(self.learners)]
        self.streams = [torch.cuda.Stream(device=device) for _ in range(self.learners)]
        self.bags, self.targets = data.bags(), data.targets.numpy()
        self.errors: list[BaseException] = []

    def _run(self, rank: int, epoch: int, start: int, end: int) -> None:
        from trainer.step import DataCursor

        server = self.ps.server
        try:
            with torch.cuda.stream(self.streams[rank]):
                shard = DataCursor(epoch=epoch, seed=self.seed).shard(len(self.targets), rank, self.learners)
                run_shard(
                    self.workers[rank],
                    self.bags,
                    self.targets,
                    shard[:end],
                    start,
                    self.batch_size,
                    self.losses[rank],
                    lambda: bool(server[C.PAUSE] or server[C.STOP]),
                    device=self.device,
                )
                self.streams[rank].synchronize()
        except Stopped:
            pass
        except BaseException as exc:  # a learner thread's failure fails the session
            self.errors.append(exc)
            server[C.PAUSE] = 1

    def run_round(
        self, epoch: int, positions: list[int], ends: list[int], tick: Callable[[], bool]
    ) -> RoundResult:
        """Run every learner from its position until its ``ends`` position or PAUSE; then drain."""
        from trainer.step import DataCursor

        ps, server = self.ps, self.ps.server
        rows = len(self.targets)
        lengths = [
            len(DataCursor(epoch=epoch, seed=self.seed).shard(rows, r, self.learners))
            for r in range(self.learners)
        ]
        for rank in range(self.learners):
            ps.counters.learner(rank)[C.CURSOR] = positions[rank]
        # The supervisor's writes since the last round (a snapshot's sum reading the
        # parameters, the epoch's mean swapped out, a restore) are queued on its stream, which
        # the learners' streams do not wait for by themselves (GraphPool.run_round likewise)
        supervisor = torch.cuda.current_stream(self.device)
        for stream in self.streams:
            stream.wait_stream(supervisor)
        server[C.PAUSE] = 0
        threads = [
            threading.Thread(
                target=self._run,
                args=(r, epoch, positions[r], ends[r]),
                name=f"taas-learner-{r}",
                daemon=True,
            )
            for r in range(self.learners)
        ]
        for thread in threads:
            thread.start()
        while alive := [t for t in threads if t.is_alive()]:
            alive[0].join(timeout=0.05)
            if not server[C.PAUSE] and ((self.losses[:, 1] < 0).any() or tick()):
                server[C.PAUSE] = 1
        if self.errors:
            raise TrainerError(f"a CUDA learner failed: {self.errors[0]!r}") from self.errors[0]
        ps.drain()
        torch.cuda.synchronize(self.device)
        return _collect(ps, self.losses, lengths)

    def close(self) -> None:
        """Threads end with their round; nothing to stop."""
