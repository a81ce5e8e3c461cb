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
landing in one call (``land_in_turn``). At K = 16: dense 0.96 x Hogwild, sparse 0.53-0.61 x.
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

    def count(self, first: int, last: int) -> int:
        """How many rows stripes ``first``..``last`` have."""
        return self.cuts[last + 1] - self.cuts[first]

    def of(self, first: int, last: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        """The rows of stripes ``first``..``last``, their gradient rows and how many."""
        a, b = self.cuts[first], self.cuts[last + 1]
        return self.rows[a:b], self.values[a:b], b - a


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
        order first (a stable sort of their stripe numbers, one gather of the values).
        """
        stripe_of = rows.numpy() // self.rows_per_stripe
        if not rows_sorted:
            order = np.argsort(stripe_of, kind="stable")
            stripe_of, index = stripe_of[order], torch.from_numpy(order)
            rows, values = rows.index_select(0, index), values.index_select(0, index)
        cuts = np.zeros(self.count + 1, dtype=np.int64)
        np.cumsum(np.bincount(stripe_of, minlength=self.count), out=cuts[1:])
        return RowSplit(rows, values, cuts.tolist())

    def touched(self, split: RowSplit | None, order: list[int]) -> list[int]:
        """The stripes a gradient touches, in ``order``: those with dense pieces or its rows."""
        cuts = split.cuts if split is not None else None
        return [s for s in order if self.pieces[s] or (cuts is not None and cuts[s + 1] > cuts[s])]


def land_in_turn(
    locks: Sequence[Any],
    stripes: list[int],
    land: Callable[[list[int]], None],
    joins: Callable[[list[int], int], bool],
    check: Callable[[], None],
) -> None:
    """Land every stripe in ``stripes`` under its lock, ``land(held)`` for runs of them.

    Free stripes first, in the given order. Holding a run, the next stripe is taken too if
    ``joins(held, stripe)`` (the caller's rule: later in the table, and the run stays cheap
    for one call) and its lock is free at once: the run then lands in one call. When every
    stripe left is taken, wait for the first of them, holding none, calling ``check()``
    every ``_WAIT_S`` (it raises to give up: the holder may be dead). Nothing is ever waited
    for while a stripe is held, so every wait ends while the holders live.
    """
    pending = stripes
    while pending:
        left: list[int] = []
        i = 0
        while i < len(pending):
            held = [pending[i]]
            i += 1
            if not locks[held[0]].acquire(block=False):
                left.append(held[0])
                continue
            while i < len(pending) and joins(held, pending[i]) and locks[pending[i]].acquire(block=False):
                held.append(pending[i])
                i += 1
            _land_run(locks, held, land)
        if left and len(left) == len(pending):
            first = left.pop(0)
            while not locks[first].acquire(timeout=_WAIT_S):
                check()
            _land_run(locks, [first], land)
        pending = left


def _land_run(locks: Sequence[Any], held: list[int], land: Callable[[list[int]], None]) -> None:
    """``land(held)`` with the stripes ``held``; release them whatever happens."""
    try:
        land(held)
    finally:
        for stripe in held:
            locks[stripe].release()
