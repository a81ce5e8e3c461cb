"""ParameterServer: the parameters once in shared memory, the slot ring, the apply role.

There is no server process. The *apply role* is a lock that any learner (or the supervisor)
takes to apply gradients; whoever holds it applies and releases without ever waiting for
anything else. A learner pushing a gradient either

* takes the apply role, waiting at most one mean apply (the holder is at most that far from
  done), applies its own previous gradient if that is still READY in its slot, then its new
  one straight from its local tensors: no slot copy (the *direct* path, the common case),
  then drains any READY slots other learners left; or
* finds the role still taken, copies the gradient into its own slot (FREE → FILLING → READY)
  and goes back to computing; the role holder, or the next learner to take it, applies it.

Every gradient is applied by exactly one party exactly once: a direct gradient by its
learner inside one critical section; a slot gradient by the holder that moved the slot
READY → APPLYING, a move only the single holder can make (see trainer/ps/slots.py). The
step is staleness-aware: the learning rate times min(1, (K - 1) / staleness), staleness =
updates applied between the version the gradient was computed against and its apply
(``staleness_scale``). An optional staleness
bound makes a learner wait before it reads the version, until one more gradient in flight
cannot take any gradient's staleness past the bound (``start_gradient``).
docs/parameter-server.md argues deadlock freedom, exactly-once and the bound in full.

The state and the apply role's work on it (ordering, landing, draining, recovery, snapshots)
are trainer.ps.applier's; the update rule is trainer.ps.optimizer's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.multiprocessing as mp

from trainer.ps import counters as C
from trainer.ps.applier import Applier, Gradient, PSHandles, Stopped
from trainer.ps.counters import Counters
from trainer.ps.optimizer import OptimizerConfig
from trainer.ps.slots import BASE_VERSION, FREE, POSITION, READY, ROWS, SAMPLES, SlotRing
from trainer.ps.stripes import JOIN_MIN_ROWS, RUN_MAX_ROWS

_HELP_WAIT_S = 0.01  # how long a blocked pusher waits on the apply role before re-checking STOP


class ParameterServer(Applier):
    """A view of the shared session state with the push, drain and apply operations: the
    learners' side (the staleness bound, push) here, the apply role's inherited (Applier)."""

    @classmethod
    def create(
        cls,
        params: Sequence[tuple[torch.Tensor, bool]],
        optimizer: OptimizerConfig,
        learners: int,
        max_rows: int,
        shared: bool,
        device: torch.device | None = None,
        locks: tuple[Any, list[Any], list[Any]] | None = None,
        stripes: int = 0,
        run_rows: int = RUN_MAX_ROWS,
        join_min: int = JOIN_MIN_ROWS,
    ) -> ParameterServer:
        """A fresh server over copies of ``params`` ((tensor, is_rows) each), version 0.

        ``shared``: put every tensor in shared memory (K > 1 processes); K = 1 runs in-process.
        ``max_rows``: the most embedding rows one mini-batch can touch (slot capacity).
        ``device``: CUDA puts parameters, moments and slot payloads in device memory, for
        learners that are streams of this process (trainer.ps.cuda); ``shared`` must be False.
        ``stripes``: S > 0 lands gradients outside the apply role, S stripes in parallel
        (trainer.ps.stripes); 0 applies them whole under the role. ``locks``: the apply lock,
        the publish locks and the stripe locks made before the learners were spawned (their
        stripe count wins over ``stripes``). ``run_rows`` and ``join_min``: how a lander joins
        stripes into runs landed in one call (trainer.ps.stripes.land_in_turn).
        """
        if (stripes or (locks and locks[2])) and device is not None and device.type == "cuda":
            raise ValueError("stripes are for learner processes on CPU; CUDA learners are streams")

        def place(tensor: torch.Tensor) -> torch.Tensor:
            tensor = tensor.detach().to(device).clone().contiguous()
            return tensor.share_memory_() if shared else tensor

        tensors = [place(p) for p, _ in params]
        is_rows = [r for _, r in params]
        state: list[torch.Tensor] = []
        if optimizer.kind == "adam":
            for tensor in tensors:
                state += [place(torch.zeros_like(tensor)), place(torch.zeros_like(tensor))]
        elif optimizer.kind != "sgd":
            raise ValueError(f"unknown optimizer {optimizer.kind!r}")
        ctx = mp.get_context("spawn")
        apply_lock, publish, stripe_locks = (
            locks
            if locks is not None
            else (ctx.Lock(), [ctx.Lock() for _ in range(learners)], [ctx.Lock() for _ in range(stripes)])
        )
        slots = SlotRing.create(
            learners,
            max_rows if any(is_rows) else 0,
            [(tuple(t.shape), r) for t, r in zip(tensors, is_rows, strict=True)],
            iter(publish).__next__,
            shared,
            device,
            payload=not stripe_locks,  # a striped server's pushers land their own gradients
        )
        return cls(
            PSHandles(
                tensors,
                is_rows,
                state,
                optimizer,
                Counters.create(learners, shared).tensor,
                slots,
                apply_lock,
                stripe_locks,
                run_rows,
                join_min,
            )
        )

    # --- the learner side ------------------------------------------------------------------

    def start_gradient(self, rank: int) -> int:
        """The version learner ``rank``'s next gradient is computed against (read before its pull).

        The gradient is in flight from here until it is applied: ``end_gradient`` must follow
        once it is pushed or given up. With a staleness bound B, the learner first waits until
        admitting it keeps every gradient's staleness within B: with F the gradients in flight
        and V the version, until max over F of (V - base) + |F| <= B. Whatever order the F
        are applied in, each apply raises V by one and takes one gradient out of F, so the sum
        never grows for those left, and a gradient's staleness at its apply is at most B
        (docs/parameter-server.md). Raises Stopped on STOP or PAUSE while waiting.
        """
        mine = self.counters.learner(rank)
        bound = self.opt.staleness_bound
        if bound is None:
            version = self.landed()
            mine[C.COMPUTING] = version + 1
            return version
        start = time.perf_counter_ns()
        try:
            while True:
                # A plain look first: take the role (which pushers need) only to drain READY
                # slots, which nobody else may be left to apply, or when admission looks likely.
                bases, ready = self._in_flight(careful=False)
                if (ready or self._admits(bases, bound, self.landed())) and self.apply_lock.acquire(
                    timeout=_HELP_WAIT_S
                ):
                    try:
                        self._drain_locked()
                        version = self.landed()
                        if self._admits(self._in_flight(careful=True)[0], bound, version):
                            mine[C.COMPUTING] = version + 1  # under the role: admitted and counted at once
                            return version
                    finally:
                        self.apply_lock.release()
                if self.server[C.STOP] or self.server[C.PAUSE]:
                    raise Stopped  # nothing read yet: the cursor stays before this mini-batch
                os.sched_yield()
        finally:
            mine[C.WAIT_NS] += time.perf_counter_ns() - start

    def _in_flight(self, careful: bool) -> tuple[list[int], bool]:
        """The base versions of the gradients not yet applied, and whether a slot is READY.

        ``careful`` (under the apply role): a gradient is counted while its learner computes
        it (COMPUTING, cleared only after it is published or applied) and while it is READY;
        reading COMPUTING before the slot's state through its publish lock, a gradient that
        moves from one to the other in between is seen in the slot. Counting one twice in
        that window only makes the gate stricter. Without ``careful``, a racy estimate.
        """
        bases = [int(c) - 1 for c in self.counters.array[1:, C.COMPUTING] if c]
        states = [self.slots.state(s) for s in range(len(self.slots))] if careful else self.slots.states()
        ready = [s for s, state in enumerate(states) if state == READY]
        bases += [int(self.slots.header[s][BASE_VERSION]) for s in ready]
        return bases, bool(ready)

    def _admits(self, bases: list[int], bound: int, base: int) -> bool:
        """Whether one more gradient, computed against ``base``, keeps the in-flight ``bases``
        and itself within ``bound`` (``base`` is below the version while stripes land)."""
        return self.version() - min([*bases, base]) + len(bases) <= bound

    def push(self, rank: int, grad: Gradient, base_version: int, position: int, samples: int) -> None:
        """Hand ``grad`` (computed against ``base_version``) to the server; it will be applied once.

        The push consumes ``grad``: the apply may scale its tensors in place.

        ``position``: the learner's shard position after this mini-batch; it becomes the
        learner's committed cursor when the gradient is applied. Raises Stopped if the
        session stops while this learner waits for its slot (the gradient is then not pushed).
        """
        if self.layout is not None:
            self._push_striped(rank, grad, base_version, position, samples)
            return
        start = time.perf_counter_ns()
        mine = self.counters.learner(rank)
        if self.apply_lock.acquire(block=False) or self.apply_lock.acquire(timeout=self._patience_s()):
            try:
                # Our previous gradient may still be READY in our slot: it goes first, so
                # our cursor only moves forward (applied after this one, it would set the
                # cursor back before a batch that is already applied).
                if self.slots.looks_ready(rank) and self.slots.take_ready(rank):
                    self._apply_slot(rank)
                # Direct path: we hold the apply role, so applying our own gradient here is
                # the one and only apply of it; counted in the same critical section.
                self._apply(rank, grad.rows, grad.values, base_version, position)
                self.server[C.DIRECT] += 1
                # Out of flight in the same critical section: a learner at the bound's gate
                # takes the role to admit, so it never counts this gradient once applied.
                mine[C.COMPUTING] = 0
                self._drain_locked()
            finally:
                self.apply_lock.release()
            mine[C.SAMPLES] += samples
            mine[C.PUSH_NS] += time.perf_counter_ns() - start
            return
        # Our slot is READY or APPLYING from our previous push until the role holder frees it.
        # Waiting for it, we own no slot and hold no lock; we help by taking the role ourselves.
        while self.slots.state(rank) != FREE:
            if self.apply_lock.acquire(timeout=_HELP_WAIT_S):  # the holder never waits: this ends
                try:
                    self._drain_locked()
                finally:
                    self.apply_lock.release()
            elif self.server[C.STOP] or self.server[C.PAUSE]:
                raise Stopped  # not pushed: the cursor stays before this mini-batch
        self.slots.begin_fill(rank)
        copy_start = time.perf_counter_ns()
        count = grad.rows.numel()
        if count:
            self.slots.ids[rank, :count].copy_(grad.rows)
        for i, value in enumerate(grad.values):
            target = self.slots.values[i][rank]
            (target[:count] if self.is_rows[i] else target).copy_(value)
        header = self.slots.header[rank]
        header[BASE_VERSION], header[POSITION], header[ROWS], header[SAMPLES] = (
            base_version,
            position,
            count,
            samples,
        )
        self._sync()  # CUDA: the copy above has landed before anyone can see READY
        mine[C.COPY_NS] += time.perf_counter_ns() - copy_start
        self.slots.publish_ready(rank)  # the push is complete and counted here
        mine[C.SAMPLES] += samples
        mine[C.BYTES_PUSHED] += grad.nbytes()
        if self.apply_lock.acquire(block=False):  # opportunistic: apply it now if no one is
            try:
                self._drain_locked()
            finally:
                self.apply_lock.release()
        mine[C.PUSH_NS] += time.perf_counter_ns() - start

    def _push_striped(
        self, rank: int, grad: Gradient, base_version: int, position: int, samples: int
    ) -> None:
        """``push`` on a striped server: order the gradient under the role, land it outside.

        The role is held for a few counter stores only, so the pusher waits for it rather
        than copy into its slot (slots stay FREE). Its LANDING word is set under the role
        before the version moves, cleared once every stripe landed. Raises Stopped, with
        nothing ordered, on STOP or PAUSE while waiting for the role; raises Stopped with
        LANDING left set (the parameters partly updated: ``recover`` refuses) when a stripe
        it waits for may be held by a dead learner (STOP or DEATH).
        """
        start = time.perf_counter_ns()
        mine = self.counters.learner(rank)
        while not self.apply_lock.acquire(timeout=_HELP_WAIT_S):
            if self.server[C.STOP] or self.server[C.PAUSE]:
                raise Stopped
        try:
            held = time.perf_counter_ns()
            lr, step = self._order(rank, grad, base_version, position, rank)
            self.server[C.VERSION] = step  # after LANDING is set (``landed``)
            self.server[C.DIRECT] += 1
            mine[C.COMPUTING] = 0  # out of flight in the critical section that ordered it
            self.server[C.APPLY_NS] += time.perf_counter_ns() - held
        finally:
            self.apply_lock.release()
        landing = time.perf_counter_ns()
        self._land(grad.rows, grad.values, lr, step, rank)
        mine[C.LANDING] = 0
        mine[C.SAMPLES] += samples
        end = time.perf_counter_ns()
        mine[C.LAND_NS] += end - landing
        mine[C.PUSH_NS] += end - start

    def _patience_s(self) -> float:
        """How long a pusher waits for the apply role before using its slot: one mean apply.

        The holder is at most one apply from done, so waiting that long usually wins the role
        and applies directly, which costs less than copying the gradient into a slot and
        making the holder apply it too (measured: large sparse batches). Bounded at 1 ms.
        """
        server = self.server
        return min(int(server[C.APPLY_NS]) / max(int(server[C.APPLIED]), 1) / 1e9, 0.001)
