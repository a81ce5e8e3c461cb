"""Epoch iterate averaging: an epoch's model is the mean of its parameters at evenly spaced
points of the epoch, not its last iterate.

Plain SGD at a fixed rate ends an epoch wherever its last few steps threw it; the mean of
the epoch's iterates smooths that noise out (Polyak-Ruppert averaging, restarted every
epoch). Training goes on from the last iterate; the mean is what is validated, kept as the
best epoch's weights and saved (docs/model.md, "Averaging each epoch's iterates").

The snapshots fall at *data positions* (every learner parks at its snapshot's position in
its shard), not at update counts: the CUDA graph learner counts its updates only when the
GPU's chunks are harvested, so a count would put its snapshots, and its resumes, at places
that depend on timing. A snapshot position is a whole number of mini-batches into the
shard, so parking there never cuts a mini-batch short.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class SnapshotPlan:
    """Where in each learner's shard an epoch's snapshots fall.

    ``shards``: each learner's rows in an epoch; ``snapshots``: the most an epoch takes
    (0: no averaging, one "snapshot" at the shard's end that nothing sums). Snapshot ``i``
    (1-based) is ``i x every`` mini-batches into every shard, ``every`` being
    ``ceil(steps / snapshots)`` of the longest shard's ``steps``, and the last one is at the
    shard's end: an epoch of 690 steps takes them at 87, 174, ..., 609 and 690, one of 3
    steps at 1, 2 and 3.
    """

    shards: tuple[int, ...]
    batch_size: int
    snapshots: int

    @property
    def steps(self) -> int:
        """The longest shard's mini-batches."""
        return math.ceil(max(self.shards, default=0) / self.batch_size)

    @property
    def every(self) -> int:
        """Mini-batches between two snapshots."""
        return max(1, math.ceil(self.steps / self.snapshots) if self.snapshots else self.steps)

    @property
    def count(self) -> int:
        """The snapshots an epoch takes; the last one is at its end."""
        return max(1, math.ceil(self.steps / self.every))

    def ends(self, index: int) -> list[int]:
        """Each learner's shard position of snapshot ``index`` (1-based)."""
        rows = index * self.every * self.batch_size if index < self.count else math.inf
        return [int(min(rows, shard)) for shard in self.shards]

    def next_ends(self, positions: list[int]) -> list[int]:
        """Where the next round stops: the first snapshot some learner has not reached.

        Read from the positions, not from a count of snapshots taken, so a learner that
        reached it while another parked earlier waits there, and no state can make a
        round start past its end."""
        for index in range(1, self.count):
            ends = self.ends(index)
            if any(p < e for p, e in zip(positions, ends, strict=True)):
                return ends
        return self.ends(self.count)


@dataclass
class IterateSum:
    """The running sum of this epoch's snapshots of the parameters, and their count.

    The sum's buffers, and those that hold the last iterate while the mean is in the
    parameters, are allocated once and reused every epoch: a fresh tensor of a full table
    (77 MB) costs several times an add into a resident one, its pages being zeroed as they
    are first touched (benchmarks/averaging_cost.py).
    """

    sums: list[torch.Tensor] | None = None  # valid while count > 0
    count: int = 0
    _last: list[torch.Tensor] | None = field(default=None, repr=False, compare=False)

    def add(self, params: list[torch.Tensor]) -> None:
        """Take a snapshot (the learners are parked: the parameters are at one version)."""
        with torch.no_grad():
            if self.sums is None or self.count == 0:
                self.sums = _copied(params, into=self.sums)
            else:
                for total, p in zip(self.sums, params, strict=True):
                    total.add_(p)
        self.count += 1

    @contextmanager
    def mean_in(self, params: list[torch.Tensor], keep: Callable[[], bool]) -> Iterator[None]:
        """Hold the snapshots' mean in ``params`` for the block, then start the next epoch's sum.

        The last iterate comes back afterwards, for training to go on from, unless ``keep()``
        is true then (training has finished: the mean is the model). With nothing summed
        (``average_snapshots`` 0) the block runs on the last iterate.
        """
        if self.sums is None or self.count == 0:
            yield
            return
        with torch.no_grad():
            self._last = _copied(params, into=self._last)
            try:
                for p, total in zip(params, self.sums, strict=True):
                    p.copy_(total).div_(self.count)
                yield
            finally:
                if not keep():
                    for p, iterate in zip(params, self._last, strict=True):
                        p.copy_(iterate)
        self.count = 0

    def as_dict(self) -> dict[str, Any]:
        """For a checkpoint: the sums on the CPU (None between epochs) and the count."""
        sums = None if self.sums is None or not self.count else [s.detach().cpu().clone() for s in self.sums]
        return {"sums": sums, "count": self.count}

    @classmethod
    def from_dict(cls, saved: dict[str, Any] | None, device: torch.device) -> IterateSum:
        """From ``as_dict``; None (a checkpoint written before averaging) is an empty sum."""
        if saved is None or saved["sums"] is None:
            return cls()
        return cls([s.to(device) for s in saved["sums"]], int(saved["count"]))


def _copied(params: list[torch.Tensor], into: list[torch.Tensor] | None) -> list[torch.Tensor]:
    """``params`` copied into the buffers ``into``, allocated on first use (None) and reused after."""
    if into is None:
        return [p.detach().clone() for p in params]
    for buffer, p in zip(into, params, strict=True):
        buffer.copy_(p)
    return into
