"""Stripes: the parameters cut into S parts, each behind a lock of its own.

With one apply role, every update of every learner is applied by one party at a time, and
at 16 cores that role was busy 72-98 % of the time at 0.16-0.28 x Hogwild's throughput
(docs/benchmarks.md). With stripes the role only *orders* a gradient (its version,
staleness and learning rate, the learner's cursor: a few counter stores), and the learner
then *lands* it stripe by stripe outside the role, each stripe under its own lock, while
other learners land theirs in other stripes. Two gradients touching the same stripe land
one after the other, so no update is lost (Hogwild's lock-free read-modify-writes can lose
one); a lander holding stripes never waits for anything (it adds a stripe to what it holds
only if that lock is free at once), so stripe waits always end while their holders live.

The layout: the row parameter (the embedding table) is cut into S ranges of rows; a dense
parameter of at least ``CHUNK_MIN`` elements into S flat ranges; a smaller one goes whole
to one stripe (cutting it would only multiply per-call costs). A gradient's rows are split
by range; its stripes are taken in whatever order they come free, later free ones of it
landing in one call when each has rows enough (``land_in_turn``). At K = 16: dense 0.88-0.96 x
Hogwild, sparse 0.5-0.7 x at batch 1 and 0.77-0.86 x at batch 16 (docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


def default_stripes(learners: int) -> int:
    """The engine's stripe count for ``learners`` learner processes (docs/benchmarks.md).

    Two learners rarely find the apply role taken, and stripes cost each gradient a split
    and more calls (measured 0.6-0.85 x at K = 2); past that, one stripe per learner."""
    return 0 if learners <= 2 else learners


CHUNK_MIN = 1 << 18  # dense parameters this large (1 MiB of float32) are cut across all stripes
# A run of stripes lands at most this many rows in one call (land_in_turn). At K = 16, runs of
# up to 128 rows, or stripes with dense pieces landing alone, measured no better.
RUN_MAX_ROWS = 64
# A stripe with fewer of a gradient's rows than this lands alone (land_in_turn). Joining saves
# a call's fixed cost but holds every stripe of the run for the whole call, dense pieces
# included: a batch-1 gradient (24 rows over 16 stripes) joined most stripes into one run with
# the output layer's add, so at K = 16 each landing held nearly every lock. Measured at K = 16,
# sparse model, ps / Hogwild in the same runs: batch 1 0.34-0.48 -> 0.52-0.70, batch 16
# 0.77-0.84 -> 0.79-0.86 (docs/benchmarks.md).
JOIN_MIN_ROWS = 8
_WAIT_S = 0.01  # a blocked stripe wait re-checks whether to give up this often


@dataclass(frozen=True)
class Piece:
    """A flat range ``[start, end)`` of dense parameter ``param``."""

    param: int
    start: int
    end: int


@dataclass(frozen=True)
class RowSplit:
    """A gradient's rows grouped by stripe: stripes a..b have ``rows[cuts[a]:cuts[b + 1]]``
    and the same slice of ``values``."""

    rows: torch.Tensor
    values: torch.Tensor  # every row's gradient, in stripe order
    cuts: list[int]


class StripeLayout:
    """Which part of which parameter each of ``count`` stripes holds."""

    def __init__(self, shapes: Sequence[tuple[tuple[int, ...], bool]], count: int) -> None:
        if count < 1:
            raise ValueError(f"a striped server needs at least one stripe, not {count}")
        if sum(is_rows for _, is_rows in shapes) > 1:
            raise ValueError("a striped server takes at most one row parameter")
        self.count = count
        table_rows = next((shape[0] for shape, is_rows in shapes if is_rows), 0)
        self.rows_per_stripe = max(-(-table_rows // count), 1)  # stripe s: rows [s * this, (s + 1) * this)
        self._bounds = np.arange(count + 1, dtype=np.int64) * self.rows_per_stripe
        self._bounds[-1] = np.iinfo(np.int64).max  # the last stripe ends after every row
        self.pieces: list[list[Piece]] = [[] for _ in range(count)]
        small, chunked = 0, False
        for param, (shape, is_rows) in enumerate(shapes):
            if is_rows:
                continue
            numel = int(np.prod(shape))
            if numel >= CHUNK_MIN:
                chunked = True
                edges = [numel * s // count for s in range(count + 1)]
                for s in range(count):
                    self.pieces[s].append(Piece(param, edges[s], edges[s + 1]))
            else:
                self.pieces[(param + small) % count].append(Piece(param, 0, numel))
                small += 1
        # Runs of stripes land their rows in one call, unless a stripe holds a cut dense
        # parameter: that work is long enough that a call's fixed cost does not matter, and
        # holding several such stripes at once would only make others wait.
        self.joinable = not chunked

    def split_rows(self, rows: torch.Tensor, values: torch.Tensor, rows_sorted: bool) -> RowSplit:
        """Group a gradient's rows by stripe: row r belongs to stripe r // rows_per_stripe.

        Sorted rows (Adam's coalesced ones) are already grouped; others are put in stripe
        order first (a stable sort of their stripe numbers, one gather of the values). Either
        way a stripe's rows lie between its bounds, so a binary search of the bounds cuts them.
        """
        ids = rows.numpy()
        if not rows_sorted:
            order = np.argsort(ids // self.rows_per_stripe, kind="stable")
            ids, index = ids[order], torch.from_numpy(order)
            rows, values = rows.index_select(0, index), values.index_select(0, index)
        cuts = np.searchsorted(ids, self._bounds).tolist()
        return RowSplit(rows, values, cuts)

    def touched(self, cuts: list[int] | None, order: list[int]) -> list[int]:
        """The stripes a gradient touches, in ``order``: those with dense pieces or its rows
        (``cuts``: ``split_rows``'s; None: no rows)."""
        return [s for s in order if self.pieces[s] or (cuts is not None and cuts[s + 1] > cuts[s])]


def land_in_turn(
    locks: Sequence[Any],
    stripes: list[int],
    land: Callable[[list[int]], None],
    cuts: list[int] | None,
    check: Callable[[], None],
    run_rows: int = RUN_MAX_ROWS,
    join_min: int = JOIN_MIN_ROWS,
) -> None:
    """Land every stripe in ``stripes`` under its lock, ``land(held)`` for runs of them.

    Free stripes first, in the given order. With ``cuts`` (the gradient's rows split by
    stripe: stripe s has rows ``cuts[s]:cuts[s + 1]``), a lander holding a run takes the next
    stripe too if its lock is free at once, it lies later in the table with none of the
    gradient's rows in between (stripes skipped in this pass, or landed in an earlier one),
    it has at least ``join_min`` of the rows (as the run's first stripe must), and the run
    stays within ``run_rows`` rows: the run's rows, ``cuts[held[0]]`` to
    ``cuts[held[-1] + 1]``, then land in one call. Without ``cuts`` each stripe lands alone.
    When every stripe left is taken, wait for the first of them, holding none, calling
    ``check()`` every ``_WAIT_S`` (it raises to give up: the holder may be dead). Nothing is
    ever waited for while a stripe is held, so every wait ends while the holders live.
    """
    pending = stripes
    while pending:
        left: list[int] = []
        i, n = 0, len(pending)
        while i < n:
            held = [pending[i]]
            i += 1
            if not locks[held[0]].acquire(block=False):
                left.append(held[0])
                continue
            if cuts is not None and cuts[held[0] + 1] - cuts[held[0]] >= join_min:
                limit = cuts[held[0]] + run_rows
                while (
                    i < n
                    and _joins(cuts, held[-1], pending[i], limit, join_min)
                    and locks[pending[i]].acquire(block=False)
                ):
                    held.append(pending[i])
                    i += 1
            _land_run(locks, held, land)
        if left and len(left) == len(pending):
            first = left.pop(0)
            while not locks[first].acquire(timeout=_WAIT_S):
                check()
            _land_run(locks, [first], land)
        pending = left


def _joins(cuts: list[int], last: int, stripe: int, limit: int, join_min: int) -> bool:
    """Whether ``stripe`` may join a run ending at ``last`` whose rows must end by ``limit``."""
    return (
        stripe > last
        and cuts[stripe] == cuts[last + 1]
        and cuts[stripe + 1] <= limit
        and cuts[stripe + 1] - cuts[stripe] >= join_min
    )


def _land_run(locks: Sequence[Any], held: list[int], land: Callable[[list[int]], None]) -> None:
    """``land(held)`` with the stripes ``held``; release them whatever happens."""
    try:
        land(held)
    finally:
        for stripe in held:
            locks[stripe].release()
