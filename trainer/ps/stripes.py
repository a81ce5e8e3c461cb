"""Stripes: the parameters cut into S parts, each behind a lock of its own.

With one apply role, every update of every learner is applied by one party at a time, and
at 16 cores that role was busy 72-98 % of the time at 0.16-0.28 x Hogwild's throughput
(docs/benchmarks.md). With stripes the role only *orders* a gradient (its version,
staleness and learning rate, the learner's cursor: a few counter stores), and the learner
then *lands* it stripe by stripe outside the role, each stripe under its own lock, while
other learners land theirs in other stripes. Two gradients touching the same stripe land
one after the other, so no update is lost (Hogwild's lock-free read-modify-writes can lose
one); a lander holds one stripe lock at a time and never waits for anything while holding
it, so stripe waits always end while their holders live.

The layout: the row parameter (the embedding table) is cut into S ranges of rows; a dense
parameter of at least ``CHUNK_MIN`` elements into S flat ranges; a smaller one goes whole
to one stripe (cutting it would only multiply per-call costs). A gradient's rows are split
by range; its stripes are taken in whatever order they come free (``land_in_turn``).
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
    """A gradient's rows grouped by stripe: stripe s has ``rows[cuts[s]:cuts[s + 1]]``."""

    rows: torch.Tensor
    values: torch.Tensor
    cuts: np.ndarray

    def of(self, stripe: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Stripe ``stripe``'s rows and their gradient rows (views, possibly empty)."""
        a, b = int(self.cuts[stripe]), int(self.cuts[stripe + 1])
        return self.rows[a:b], self.values[a:b]


class StripeLayout:
    """Which part of which parameter each of ``count`` stripes holds."""

    def __init__(self, shapes: Sequence[tuple[tuple[int, ...], bool]], count: int) -> None:
        if count < 1:
            raise ValueError(f"a striped server needs at least one stripe, not {count}")
        self.count = count
        self.table_rows = next((shape[0] for shape, is_rows in shapes if is_rows), 0)
        self.pieces: list[list[Piece]] = [[] for _ in range(count)]
        small = 0
        for param, (shape, is_rows) in enumerate(shapes):
            if is_rows:
                continue
            numel = int(np.prod(shape))
            if numel >= CHUNK_MIN:
                edges = [numel * s // count for s in range(count + 1)]
                for s in range(count):
                    self.pieces[s].append(Piece(param, edges[s], edges[s + 1]))
            else:
                self.pieces[(param + small) % count].append(Piece(param, 0, numel))
                small += 1

    def split_rows(self, rows: torch.Tensor, values: torch.Tensor, rows_sorted: bool) -> RowSplit:
        """Group a gradient's rows by stripe: row r belongs to stripe r * S // table_rows.

        Sorted rows (Adam's coalesced ones) are already grouped; others are put in stripe
        order first (a stable sort of their stripe numbers, one gather of the values).
        """
        stripe_of = rows.numpy() * self.count // max(self.table_rows, 1)
        if not rows_sorted:
            order = np.argsort(stripe_of, kind="stable")
            stripe_of, index = stripe_of[order], torch.from_numpy(order)
            rows, values = rows.index_select(0, index), values.index_select(0, index)
        cuts = np.searchsorted(stripe_of, np.arange(self.count + 1), side="left")
        return RowSplit(rows, values, cuts)

    def busy(self, split: RowSplit | None) -> list[int]:
        """The stripes a gradient touches: those with dense pieces or with some of its rows."""
        return [
            s
            for s in range(self.count)
            if self.pieces[s] or (split is not None and split.cuts[s + 1] > split.cuts[s])
        ]


def land_in_turn(
    locks: Sequence[Any], stripes: list[int], land: Callable[[int], None], check: Callable[[], None]
) -> None:
    """Run ``land(s)`` for every stripe in ``stripes``, each under its lock, one lock at a time.

    Free stripes first, in the given order; when every one left is taken, wait for the first
    of them, calling ``check()`` every ``_WAIT_S`` (it raises to give up: its holder may be
    dead). Nothing else is waited for while a stripe is held.
    """
    pending = stripes
    while pending:
        left = []
        for stripe in pending:
            if locks[stripe].acquire(block=False):
                try:
                    land(stripe)
                finally:
                    locks[stripe].release()
            else:
                left.append(stripe)
        if left and len(left) == len(pending):
            stripe = left.pop(0)
            while not locks[stripe].acquire(timeout=_WAIT_S):
                check()
            try:
                land(stripe)
            finally:
                locks[stripe].release()
        pending = left
