"""The parameter server's shared state, and what the holder of the apply role does with it.

The state: the parameters and the optimizer's state (shared or device memory), the counters,
the slot ring and the locks, all reachable from ``PSHandles``, which a learner process
attaches with. The apply role (a lock, taken by a learner or by the supervisor) gives each
gradient its version (``_order``) and lands it in the parameters (``_land``): whole under the
role, or on a striped server stripe by stripe after the role is released. Whoever holds it
also drains the READY slots other learners left. With every learner parked or gone, the
supervisor repairs the state after a death (``recover``) and copies or restores it for a
checkpoint. The learners' side of the protocol, the push and the staleness bound, is
trainer.ps.server's.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from trainer.ps import counters as C
from trainer.ps.counters import Counters, PSStats, staleness_bucket
from trainer.ps.optimizer import OptimizerConfig, adam_dense, adam_rows, add_rows, staleness_scale
from trainer.ps.slots import BASE_VERSION, POSITION, ROWS, SlotHandles, SlotRing
from trainer.ps.stripes import JOIN_MIN_ROWS, RUN_MAX_ROWS, StripeLayout, land_in_turn


class Stopped(Exception):
    """STOP or PAUSE was raised while a learner waited (for its slot, or at the staleness
    bound); it leaves without pushing."""


@dataclass
class Gradient:
    """One mini-batch's gradient in push form.

    ``rows``: the sorted unique embedding rows the batch touched (empty when the model has
    no row parameter); ``values[i]``: for a row parameter, (len(rows), dim) — sparse push;
    for a dense parameter, its full shape.
    """

    rows: torch.Tensor
    values: list[torch.Tensor]

    def nbytes(self) -> int:
        """Bytes this gradient moves (row ids included)."""
        return self.rows.numel() * 8 + sum(v.numel() * v.element_size() for v in self.values)


@dataclass
class PSHandles:
    """Everything a learner process needs to attach to the server (picklable for spawn)."""

    params: list[torch.Tensor]
    is_rows: list[bool]
    state: list[torch.Tensor]  # optimizer state: Adam's m and v per parameter; none for SGD
    optimizer: OptimizerConfig
    counters: torch.Tensor
    slots: SlotHandles
    apply_lock: Any
    stripes: list[Any] = field(default_factory=list)  # one lock per stripe; none: land under the role
    run_rows: int = RUN_MAX_ROWS  # the most rows a run of stripes lands in one call (land_in_turn)
    join_min: int = JOIN_MIN_ROWS  # a stripe with fewer of a gradient's rows lands alone (land_in_turn)
    extra: dict[str, Any] = field(default_factory=dict)


class Applier:
    """The shared session state with the apply role's operations: order, land, drain, recover,
    snapshot (trainer.ps.server.ParameterServer adds the learners' push)."""

    def __init__(self, handles: PSHandles) -> None:
        self.handles = handles
        self.params = handles.params
        self.is_rows = handles.is_rows
        self.state = handles.state
        self.opt = handles.optimizer
        self.counters = Counters(handles.counters)
        self.server = self.counters.server
        self.slots = SlotRing(handles.slots)
        self.apply_lock = handles.apply_lock
        self.stripe_locks = handles.stripes
        shapes = [(tuple(p.shape), r) for p, r in zip(self.params, self.is_rows, strict=True)]
        self.layout = StripeLayout(shapes, len(self.stripe_locks)) if self.stripe_locks else None
        # Each stripe's dense pieces with their views of the parameter (and Adam's moments), made once.
        self._dense_work = [
            [
                (
                    piece,
                    tuple(
                        t.view(-1)[piece.start : piece.end]
                        for t in [
                            self.params[piece.param],
                            *self.state[2 * piece.param : 2 * piece.param + 2],
                        ]
                    ),
                )
                for piece in pieces
            ]
            for pieces in (self.layout.pieces if self.layout is not None else [])
        ]
        self.row_param = self.is_rows.index(True) if any(self.is_rows) else None
        # CUDA: kernels are asynchronous, so a slot's payload is complete only once the
        # stream that wrote it has finished, and may be refilled only once the stream that
        # applied it has finished reading. On CPU this is a no-op.
        on_cuda = self.params[0].is_cuda
        self._sync = (lambda: torch.cuda.current_stream().synchronize()) if on_cuda else (lambda: None)
        # CUDA: the role holder's apply is queued on its own stream, and the direct path
        # releases the role without waiting for it, so the next holder's apply, on another
        # stream, could run at the same time: two read-modify-writes of a dense parameter (or
        # of Adam's moments) would lose one update. Each apply therefore waits, on the GPU,
        # for the one before it (this event, recorded after every apply, under the role);
        # the CPU never waits. On CPU applies are synchronous and this is None.
        self._applied: torch.cuda.Event | None = torch.cuda.Event() if on_cuda else None

    def without_locks(self) -> PSHandles:
        """The handles minus their locks: what may travel through a pipe after spawn."""
        return replace(
            self.handles, apply_lock=None, stripes=[], slots=replace(self.handles.slots, publish=[])
        )

    # --- reading ---------------------------------------------------------------------------

    def version(self) -> int:
        """Updates applied so far (a plain read: possibly one update old, never torn)."""
        return int(self.server[C.VERSION])

    def landed(self) -> int:
        """The newest version whose every update has landed: a read of the parameters now
        sees at least those (lock-free, Hogwild's read). Without stripes, ``version()``.

        On a striped server a gradient gets its version (under the apply role) before it
        lands; its learner's LANDING word holds that version from just before VERSION moves
        until its last stripe landed. Reading VERSION first and the LANDING words after, any
        version counted in the first read that has not landed shows in the second.
        """
        version = self.version()
        if self.layout is None:
            return version
        landing = self.counters.array[1:, C.LANDING].copy()  # each word read once
        landing = landing[landing > 0]
        return min(version, int(landing.min()) - 1) if len(landing) else version

    def stats(self) -> PSStats:
        """Snapshot of the counters; pushed = slot READY counts + direct pushes."""
        return self.counters.stats(self.slots.pushed() + int(self.server[C.DIRECT]))

    # --- a gradient out of flight (its learner's call, or recover's for a dead learner) -----

    def end_gradient(self, rank: int) -> None:
        """Learner ``rank``'s gradient is applied, published in its slot (READY counts it from
        there) or given up: it no longer counts as computing."""
        self.counters.learner(rank)[C.COMPUTING] = 0

    # --- the apply role ----------------------------------------------------------------------

    def drain(self) -> int:
        """Take the apply role (blocking) and apply every READY slot; returns how many."""
        with self.apply_lock:
            return self._drain_locked()

    def _drain_locked(self) -> int:
        """Apply every READY slot, oldest base version first. Caller holds the apply role.
        (Striped servers never fill slots: their pushers wait for the short role instead.)

        A plain read of the words picks the slots to take through their publish locks: one
        lock per READY slot, not one per learner (an empty drain at K = 16 took 8.1 µs, now
        1.1 µs; every direct push drains). A slot published just after that read is left
        READY, as one published just after a locked scan would be: its owner tries the role
        once more, and every later holder drains it.
        """
        ready = [s for s in self.slots.ready_looking() if self.slots.take_ready(s)]
        ready.sort(key=lambda s: int(self.slots.header[s][BASE_VERSION]))
        for slot in ready:
            self._apply_slot(slot)
        return len(ready)

    def _apply_slot(self, slot: int) -> None:
        """Apply the gradient of a slot this holder moved READY → APPLYING, then free the slot."""
        header = self.slots.header[slot]
        count = int(header[ROWS])
        values = [
            self.slots.values[i][slot][:count] if self.is_rows[i] else self.slots.values[i][slot]
            for i in range(len(self.params))
        ]
        self._apply(
            slot, self.slots.ids[slot, :count], values, int(header[BASE_VERSION]), int(header[POSITION])
        )
        self._sync()  # CUDA: the apply has read the payload before the owner may overwrite it
        self.slots.release(slot)  # APPLYING → FREE: the owner may push again

    def _apply(
        self, rank: int, rows: torch.Tensor, values: Sequence[torch.Tensor], base_version: int, position: int
    ) -> None:
        """Apply one gradient of learner ``rank``, all of it under the apply role the caller
        holds (unstriped servers: striped ones order under the role and land outside it)."""
        start = time.perf_counter_ns()
        lr, step = self._order(rank, Gradient(rows, list(values)), base_version, position, None)
        self._land(rows, values, lr, step, None)
        self.server[C.VERSION] = step  # after the landing: a lock-free read of it never runs ahead
        self.server[C.APPLY_NS] += time.perf_counter_ns() - start

    def _order(
        self, rank: int, grad: Gradient, base_version: int, position: int, lander: int | None
    ) -> tuple[float, int]:
        """Give learner ``rank``'s gradient its version: count it, move the learner's cursor;
        returns its learning rate and Adam step, the version the caller then stores in
        VERSION. Caller holds the apply role.

        ``lander``: on a striped server, the learner that will land it; its LANDING word
        marks the gradient before the version moves (``landed``).
        """
        server = self.server
        staleness = int(server[C.VERSION]) - base_version
        server[C.HIST + staleness_bucket(staleness)] += 1
        lr = self.opt.rate(int(server[C.LR_CUTS]))
        lr = lr * staleness_scale(staleness, self.counters.learners) if self.opt.staleness_aware else lr
        step = int(server[C.VERSION]) + 1
        if lander is not None:
            self.counters.learner(lander)[C.LANDING] = step
        server[C.BYTES_APPLIED] += grad.nbytes()
        server[C.APPLIED] += 1
        # The learner's committed cursor moves with its gradient's version, under the same
        # role: a checkpoint (every learner parked, so every gradient landed) never sees one
        # without the other.
        self.counters.learner(rank)[C.CURSOR] = position
        return lr, step

    def _land(
        self, rows: torch.Tensor, values: Sequence[torch.Tensor], lr: float, step: int, lander: int | None
    ) -> None:
        """Add an ordered gradient to the parameters: whole (the caller holds the apply role)
        or, on a striped server, stripe by stripe under the stripe locks."""
        if self.layout is None:
            self._land_whole(rows, values, lr, step)
            return
        layout, table = self.layout, self.row_param
        sgd = self.opt.kind == "sgd"
        cuts: list[int] | None = None
        if table is not None and rows.numel():
            split = layout.split_rows(rows, values[table], self.opt.needs_unique_rows)
            rows, row_values, cuts = split.rows, split.values, split.cuts
            if sgd:
                row_values.mul_(-lr)  # once for every stripe (see _land_whole)
        flat = [v.reshape(-1) for v in values]

        def land(held: list[int]) -> None:
            for stripe in held:
                for piece, views in self._dense_work[stripe]:
                    grad = flat[piece.param][piece.start : piece.end]
                    if sgd:
                        views[0].add_(grad, alpha=-lr)
                    else:
                        param, m, v = views  # Adam: the moments' pieces beside the parameter's
                        adam_dense(param, m, v, grad, lr, step, self.opt)
            if cuts is None or table is None:
                return
            a, b = cuts[held[0]], cuts[held[-1] + 1]  # stripes between have none of its rows
            if a == b:
                return
            if sgd:
                add_rows(self.params[table], rows[a:b], row_values[a:b], b - a)
            else:
                m, v = self.state[2 * table], self.state[2 * table + 1]
                adam_rows(self.params[table], m, v, rows[a:b], row_values[a:b], lr, step, self.opt)

        first = (lander or 0) % layout.count  # learners start at different stripes
        order = [*range(first, layout.count), *range(first)]
        land_in_turn(
            self.stripe_locks,
            layout.touched(cuts, order),
            land,
            cuts if layout.joinable else None,
            self._check_stripe_wait,
            self.handles.run_rows,
            self.handles.join_min,
        )

    def _check_stripe_wait(self) -> None:
        """A lander waiting for a stripe gives up on STOP or a learner's death: the stripe's
        holder may be dead, and the supervisor only waits for survivors to park."""
        if self.server[C.STOP] or self.server[C.DEATH]:
            raise Stopped

    def _land_whole(self, rows: torch.Tensor, values: Sequence[torch.Tensor], lr: float, step: int) -> None:
        """Apply an ordered gradient to every parameter at once. Caller holds the apply role."""
        if self._applied is not None:
            torch.cuda.current_stream().wait_event(self._applied)
        for i, (param, grad) in enumerate(zip(self.params, values, strict=True)):
            if self.opt.kind == "sgd":
                if self.is_rows[i]:
                    # Scale in place, then add: index_add_ with alpha != 1 takes a slow
                    # path (measured 2.4x the time of mul_ + index_add_ on 1,536 rows).
                    # The gradient is consumed here, so overwriting it is safe.
                    add_rows(param, rows, grad.mul_(-lr), rows.numel())
                else:
                    param.add_(grad, alpha=-lr)
            elif self.is_rows[i]:
                adam_rows(param, self.state[2 * i], self.state[2 * i + 1], rows, grad, lr, step, self.opt)
            else:
                adam_dense(param, self.state[2 * i], self.state[2 * i + 1], grad, lr, step, self.opt)
        if self._applied is not None:
            self._applied.record()  # on this stream, after this apply's kernels

    # --- recovery (caller makes sure every learner is parked or gone) ----------------------

    def recover(self, dead: Sequence[int]) -> bool:
        """After learners ``dead`` died, with every other learner parked: repair or give up.

        Returns True when the state is consistent: the apply role was free (no survivor holds
        it while parked, so a taken role means a dead learner held it, possibly mid-apply),
        the dead learners' slots are usable again and every READY slot is applied, so every
        completed push has been applied exactly once. Returns False when a dead learner held
        the apply role, or a learner (dead, or a survivor that gave up waiting for a stripe the
        dead one may hold) left a gradient partly landed: the parameters may be half-updated
        and only a checkpoint is trusted. The supervisor clears DEATH once this succeeds.
        """
        if not self.apply_lock.acquire(block=False):
            return False
        self.apply_lock.release()
        if self.counters.array[1:, C.LANDING].any():
            return False  # a gradient was ordered and only partly landed (striped servers)
        for rank in dead:
            self.slots.recover(rank)
            self.end_gradient(rank)  # what it was computing will never come
        self.drain()
        return True

    # --- checkpoints (caller makes sure every learner is parked or gone) ---------------------

    def snapshot(self) -> dict[str, Any]:
        """Copies (in host memory) of the parameters and the optimizer state at the current version."""
        with self.apply_lock:
            if self.params[0].is_cuda:
                torch.cuda.synchronize()  # every learner stream's applies have landed
            return {
                "kind": self.opt.kind,
                "params": [p.detach().cpu().clone() for p in self.params],
                "state": [s.detach().cpu().clone() for s in self.state],
                "version": self.version(),
            }

    def restore(self, saved: dict[str, Any]) -> None:
        """Load a snapshot() into the shared tensors in place (learners keep their views)."""
        with self.apply_lock:
            for target, source in zip(self.params, saved["params"], strict=True):
                target.copy_(source)
            if saved["kind"] == self.opt.kind:
                for target, source in zip(self.state, saved["state"], strict=True):
                    target.copy_(source)
            self.server[C.VERSION] = int(saved["version"])
