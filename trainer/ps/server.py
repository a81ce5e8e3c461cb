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
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.multiprocessing as mp

from trainer.ps import counters as C
from trainer.ps.counters import Counters, PSStats, staleness_bucket
from trainer.ps.slots import BASE_VERSION, FREE, POSITION, READY, ROWS, SAMPLES, SlotHandles, SlotRing
from trainer.ps.stripes import JOIN_MIN_ROWS, RUN_MAX_ROWS, StripeLayout, land_in_turn

_HELP_WAIT_S = 0.01  # how long a blocked pusher waits on the apply role before re-checking STOP


class Stopped(Exception):
    """STOP or PAUSE was raised while a learner waited (for its slot, or at the staleness
    bound); it leaves without pushing."""


@dataclass(frozen=True)
class OptimizerConfig:
    """The update rule the apply role runs: "adam" (lazy on rows, like SparseAdam) or "sgd"."""

    kind: str = "adam"
    lr: float = 0.003
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    # reduce on plateau: the supervisor counts the epochs that did not improve the validation
    # score in the server's LR_CUTS counter (set only while every learner is parked), and every
    # apply uses lr * plateau_factor ** cuts, so all apply-role holders agree (1.0: constant)
    plateau_factor: float = 1.0
    # no applied gradient is staler than this: learners wait at start_gradient (None: no bound)
    staleness_bound: int | None = None
    # lr x staleness_scale(staleness, K); off only where tests count exact sums
    staleness_aware: bool = True

    def __post_init__(self) -> None:
        if self.staleness_bound is not None and self.staleness_bound < 0:
            raise ValueError(f"staleness_bound must be at least 0, not {self.staleness_bound}")

    @property
    def needs_unique_rows(self) -> bool:
        """Whether a pushed gradient's rows must be sorted and unique: Adam updates each row's
        moments once per step, while SGD's ``index_add_`` sums duplicate rows itself."""
        return self.kind == "adam"

    def rate(self, cuts: int) -> float:
        """The learning rate after ``cuts`` plateau cuts."""
        return self.lr * self.plateau_factor**cuts


def staleness_scale(staleness: int, learners: int) -> float:
    """The share of the learning rate a gradient applied ``staleness`` updates after the
    version it was computed against gets, with ``learners`` learners: 1 up to K - 1, then
    (K - 1) / staleness (K <= 2: 1 / staleness, Zhang et al.'s rule).

    K learners taking turns make every gradient about K - 1 updates stale; that much is what
    running K at once means, and is not scaled down. Scaling it down as well (lr / staleness,
    the rule until the twenty-third session) makes K learners one learner with a K-fold batch
    at the same rate: at K = 16 a set of 3,000 classes and 21,000 rows reached 0.847
    validation accuracy in its 20 epochs against K = 1's 0.977, and with this rule 0.975
    (16 cores; docs/benchmarks.md). A gradient staler than that (its learner was descheduled or
    slow) still takes a smaller step, in proportion.
    """
    return min(1.0, max(1, learners - 1) / max(1, staleness))


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


class ParameterServer:
    """A view of the shared session state with the push, drain and apply operations."""

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

    def end_gradient(self, rank: int) -> None:
        """Learner ``rank``'s gradient is applied, published in its slot (READY counts it from
        there) or given up: it no longer counts as computing."""
        self.counters.learner(rank)[C.COMPUTING] = 0

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
                        _adam_dense(param, m, v, grad, lr, step, self.opt)
            if cuts is None or table is None:
                return
            a, b = cuts[held[0]], cuts[held[-1] + 1]  # stripes between have none of its rows
            if a == b:
                return
            if sgd:
                _add_rows(self.params[table], rows[a:b], row_values[a:b], b - a)
            else:
                m, v = self.state[2 * table], self.state[2 * table + 1]
                _adam_rows(self.params[table], m, v, rows[a:b], row_values[a:b], lr, step, self.opt)

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
                    _add_rows(param, rows, grad.mul_(-lr), rows.numel())
                else:
                    param.add_(grad, alpha=-lr)
            elif self.is_rows[i]:
                _adam_rows(param, self.state[2 * i], self.state[2 * i + 1], rows, grad, lr, step, self.opt)
            else:
                _adam_dense(param, self.state[2 * i], self.state[2 * i + 1], grad, lr, step, self.opt)
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


_PUT_MAX_ROWS = 16  # index_put_ is the cheaper call up to here, index_add_ past it (see _add_rows)


def _add_rows(param: torch.Tensor, rows: torch.Tensor, values: torch.Tensor, count: int) -> None:
    """``param[rows] += values``, duplicate rows summed, in the cheaper of two exact calls.

    index_add_ has a fixed cost of ~7 us a call; index_put_ (accumulate) has less but grows
    faster per row (one thread, 128 wide, rows of a 1 M-row table out of cache: 2 rows 5.3
    against 11.7 us, 8 rows 15 / 17, 24 rows 34 / 30, 96 rows 100 / 60). A striped landing
    makes a call per run of stripes, often on few rows. ``count``: len(rows), which the
    caller knows (``Tensor.__len__`` costs ~1.5 us).
    """
    if count <= _PUT_MAX_ROWS:
        param.index_put_((rows,), values, accumulate=True)
    else:
        param.index_add_(0, rows, values)


def _fused_adam(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    m: list[torch.Tensor],
    v: list[torch.Tensor],
    lr: float,
    step: int,
    opt: OptimizerConfig,
) -> None:
    """torch's fused Adam kernel, in place (one pass instead of eight elementwise ops)."""
    b1, b2 = opt.betas
    steps = [torch.tensor(float(step), device=p.device) for p in params]  # beside the parameters
    torch._fused_adam_(
        params,
        grads,
        m,
        v,
        [],
        steps,
        lr=lr,
        beta1=b1,
        beta2=b2,
        weight_decay=0.0,
        eps=opt.eps,
        amsgrad=False,
        maximize=False,
    )


def _adam_rows(
    param: torch.Tensor,
    m: torch.Tensor,
    v: torch.Tensor,
    rows: torch.Tensor,
    grad: torch.Tensor,
    lr: float,
    step: int,
    opt: OptimizerConfig,
) -> None:
    """Lazy Adam on the touched rows only (SparseAdam's rule): untouched rows keep their moments.

    Gather the rows of the parameter and both moments, one fused Adam step, scatter back
    (``rows`` are unique, so index_copy_ writes each row once).
    """
    p_rows, m_rows, v_rows = param.index_select(0, rows), m.index_select(0, rows), v.index_select(0, rows)
    _fused_adam([p_rows], [grad.contiguous()], [m_rows], [v_rows], lr, step, opt)
    param.index_copy_(0, rows, p_rows)
    m.index_copy_(0, rows, m_rows)
    v.index_copy_(0, rows, v_rows)


def _adam_dense(
    param: torch.Tensor,
    m: torch.Tensor,
    v: torch.Tensor,
    grad: torch.Tensor,
    lr: float,
    step: int,
    opt: OptimizerConfig,
) -> None:
    _fused_adam([param], [grad.contiguous()], [m], [v], lr, step, opt)
