"""The gradient slot ring: bounded, one slot per learner, FREE → FILLING → READY → APPLYING → FREE.

Each slot has one int64 *word* = ``seq << 2 | state``. ``seq`` counts the slot's READY
transitions, so the number of completed pushes is the sum of the seqs, and it changes in the
same single store that publishes the gradient: a push is counted if and only if it became
visible to the applier. A learner killed while FILLING leaves a slot whose seq never moved:
that push did not happen.

Who may write a slot's word (the single-writer rule that replaces compare-and-swap):

    FREE → FILLING → READY       only the slot's owner, learner r for slot r
    READY → APPLYING → FREE      only the party holding the apply role (the apply lock)

Each state has exactly one party allowed to move it, so two parties never race on a word.
The publishing store (→ READY) and the applier's read of it go through the slot's
``publish`` lock, which is a full memory barrier on every architecture: the payload written
before READY is visible to whoever sees READY (x86 would not need it; ARM does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

FREE, FILLING, READY, APPLYING = 0, 1, 2, 3
STATE_NAMES = ("FREE", "FILLING", "READY", "APPLYING")

# header fields of a slot's gradient
BASE_VERSION = 0  # the model version the gradient was computed against
POSITION = 1  # the owner's shard position after this gradient's mini-batch
ROWS = 2  # how many embedding rows the gradient touches
SAMPLES = 3  # examples in the mini-batch
HEADER = 4


def word(seq: int, state: int) -> int:
    """The slot word for ``seq`` and ``state``."""
    return (seq << 2) | state


def state_of(value: int) -> int:
    """The state held in a slot word."""
    return int(value) & 3


def seq_of(value: int) -> int:
    """The READY count held in a slot word."""
    return int(value) >> 2


@dataclass
class SlotHandles:
    """The picklable part of a slot ring: shared tensors and the per-slot publish locks."""

    words: torch.Tensor  # int64 [slots]
    header: torch.Tensor  # int64 [slots, HEADER]
    ids: torch.Tensor  # int64 [slots, max_rows] (max_rows may be 0: no row parameter)
    # per parameter: [slots, max_rows, dim] or [slots, *shape]; none where slots carry no
    # gradient (a striped server's pushers land their own, so its slots stay FREE)
    values: list[torch.Tensor]
    publish: list[Any]  # one multiprocessing Lock per slot


class SlotRing:
    """Numpy views over SlotHandles plus the transitions each party may make."""

    def __init__(self, handles: SlotHandles) -> None:
        self.handles = handles
        self.words = handles.words.numpy()
        self.header = handles.header.numpy()
        self.ids = handles.ids
        self.values = handles.values
        self.publish = handles.publish

    def __len__(self) -> int:
        return len(self.words)

    @staticmethod
    def create(
        slots: int,
        max_rows: int,
        shapes: list[tuple[tuple[int, ...], bool]],
        lock_factory: Any,
        shared: bool,
        device: torch.device | None = None,
        payload: bool = True,
    ) -> SlotHandles:
        """Zeroed (all FREE, seq 0) handles; ``shapes`` = (parameter shape, is_rows) each.

        The words and headers stay in host memory (the protocol runs on the CPU); the payload
        lives on ``device`` (CUDA: beside the parameters it is applied to). Without
        ``payload`` the slots have no room for a gradient: a copy of the model per learner
        that a striped server would never use (6.6 M parameters at K = 16: 420 MB).
        """

        def alloc(
            *shape: int, dtype: torch.dtype = torch.float32, on: torch.device | None = None
        ) -> torch.Tensor:
            tensor = torch.zeros(shape, dtype=dtype, device=on)
            return tensor.share_memory_() if shared else tensor

        if not payload:
            shapes, max_rows = [], 0
        values = [
            alloc(slots, max_rows, *shape[1:], on=device) if is_rows else alloc(slots, *shape, on=device)
            for shape, is_rows in shapes
        ]
        return SlotHandles(
            words=alloc(slots, dtype=torch.int64),
            header=alloc(slots, HEADER, dtype=torch.int64),
            ids=alloc(slots, max_rows, dtype=torch.int64, on=device),
            values=values,
            publish=[lock_factory() for _ in range(slots)],
        )

    def state(self, slot: int) -> int:
        """The slot's current state, read through its publish lock (a barrier)."""
        with self.publish[slot]:
            return state_of(self.words[slot])

    def pushed(self) -> int:
        """Completed pushes through slots: the sum of the READY counts."""
        return int((self.words >> 2).sum())

    # --- owner side: FREE → FILLING → READY ------------------------------------------------

    def begin_fill(self, slot: int) -> None:
        """FREE → FILLING. Only the owner calls this, and only after seeing FREE."""
        value = self.words[slot]
        assert state_of(value) == FREE, STATE_NAMES[state_of(value)]
        # Invariant: only the owner writes a FREE or FILLING word, so no one else can have
        # moved it between the read above and this store.
        self.words[slot] = word(seq_of(value), FILLING)

    def publish_ready(self, slot: int) -> None:
        """FILLING → READY, seq + 1: the push is complete and counted in one store."""
        with self.publish[slot]:  # release barrier: the payload is visible before READY
            self.words[slot] = word(seq_of(self.words[slot]) + 1, READY)

    # --- applier side: READY → APPLYING → FREE (caller holds the apply role) -------------

    def take_ready(self, slot: int) -> bool:
        """READY → APPLYING if the slot is READY. Caller must hold the apply role."""
        with self.publish[slot]:  # acquire barrier: we see the payload published with READY
            value = self.words[slot]
            if state_of(value) != READY:
                return False
            # Invariant: only the apply-role holder moves a READY word, and there is one holder.
            self.words[slot] = word(seq_of(value), APPLYING)
            return True

    def release(self, slot: int) -> None:
        """APPLYING → FREE: the owner may fill the slot again."""
        with self.publish[slot]:
            self.words[slot] = word(seq_of(self.words[slot]), FREE)

    def recover(self, slot: int) -> None:
        """After slot ``slot``'s owner died, with every other learner parked: make it usable.

        The owner may have died inside ``publish_ready`` holding the publish lock; the one
        store under it either happened (READY: the payload was complete before the lock was
        taken, so the push counts and will be applied) or did not (FILLING: discarded, never
        counted). Either way the lock is released on the dead owner's behalf, and a FILLING
        slot goes back to FREE.
        """
        if not self.publish[slot].acquire(timeout=0.5):
            self.publish[slot].release()  # held by the dead owner (a Lock may be released by anyone)
        else:
            self.publish[slot].release()
        value = self.words[slot]
        if state_of(value) == FILLING:
            self.words[slot] = word(seq_of(value), FREE)

    def looks_ready(self, slot: int) -> bool:
        """A plain read: whether the slot seemed READY. Exact for the slot's own owner, the only
        party that makes it READY; for others a hint to confirm with ``take_ready``."""
        return state_of(self.words[slot]) == READY

    def ready_looking(self) -> list[int]:
        """The slots whose words read READY in one plain read (hints, as ``looks_ready``)."""
        return [slot for slot, value in enumerate(self.words.tolist()) if value & 3 == READY]

    def states(self) -> np.ndarray:
        """Every slot's state (a snapshot, for the supervisor and tests)."""
        return self.words & 3
