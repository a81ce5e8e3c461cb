"""Property tests of the push protocol: K learners push with random delays and random deaths,
on servers that apply under the apply role and on striped ones (trainer.ps.stripes).

Learners are threads here so that hypothesis can try many interleavings with K up to 8 in
a few seconds; a "death" is a learner that stops forever wherever it is, holding whatever it
holds (as a SIGKILLed process does). Real processes and real SIGKILLs are in test_ps_engine.
Each gradient i adds -1 to rows i, i + k·n and i + 2·k·n of a table (SGD, lr 1, no staleness
scaling; with three stripes, one row in each, and any stripe may join a run), so the table
itself records how many times each part of each gradient was applied. A learner reads the version through
the staleness bound's gate, computes for a random while and pushes, as trainer.ps.learner does.
"""

from __future__ import annotations

import random
import threading
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.ps import counters as C
from trainer.ps.applier import Gradient, Stopped
from trainer.ps.optimizer import OptimizerConfig
from trainer.ps.server import ParameterServer
from trainer.ps.slots import APPLYING, READY

_PARTS = 3  # rows per gradient: one in each stripe of a three-stripe server
_HANG_S = 20.0  # a run that takes longer than this has hung: the protocol is broken


class _Death(Exception):
    pass


class _Run:
    """One protocol run: K learner threads, n pushes each, some learners planned to die."""

    def __init__(
        self,
        k: int,
        n: int,
        deaths: dict[int, tuple[str, int]],
        rng: random.Random,
        bound: int | None,
        stripes: int,
    ) -> None:
        self.k, self.n, self.deaths, self.rng = k, n, deaths, rng
        table = torch.zeros((_PARTS * k * n, 1))
        opt = OptimizerConfig(kind="sgd", lr=1.0, staleness_aware=False, staleness_bound=bound)
        self.ps = ParameterServer.create(
            [(table, True)], opt, k, max_rows=_PARTS, shared=False, stripes=stripes, join_min=0
        )
        self.delays = [[rng.uniform(0, 0.002) for _ in range(n)] for _ in range(k)]
        self.local = threading.local()
        self.the_end = threading.Event()
        self.dead: set[int] = set()
        self.staleness: list[int] = []  # of every apply, in apply order
        self.cursors: list[list[int]] = [[] for _ in range(k)]  # each learner's, in apply order
        self.row_of: dict[int, int] = {}  # version -> the row of the gradient that got it
        self.unlanded_reads: list[tuple[int, int]] = []  # (rank, base) read before base landed
        self._patch()

    def _die(self, rank: int) -> None:
        self.dead.add(rank)
        self.the_end.wait()  # stopped forever, holding whatever we hold, until the test ends
        raise _Death

    def _patch(self) -> None:
        ps = self.ps
        real_publish, real_order, real_land = ps.slots.publish_ready, ps._order, ps._land

        def publish_ready(slot: int) -> None:
            if getattr(self.local, "die_at", None) == "filling":
                self._die(self.local.rank)  # dies FILLING: this push never completes
            real_publish(slot)

        def order(
            rank: int, grad: Gradient, base: int, position: int, lander: int | None
        ) -> tuple[float, int]:
            if getattr(self.local, "die_at", None) == "applying":
                self._die(self.local.rank)  # dies holding the apply role, before touching anything
            time.sleep(self.rng.uniform(0, 0.0005))
            self.staleness.append(ps.version() - base)
            self.cursors[rank].append(position)
            self.row_of[ps.version() + 1] = int(grad.rows[0])
            return real_order(rank, grad, base, position, lander)

        def land(
            rows: torch.Tensor, values: list[torch.Tensor], lr: float, step: int, lander: int | None
        ) -> None:
            if getattr(self.local, "die_at", None) == "landing":
                if ps.layout is not None:  # dies holding the stripe it lands in (unless another
                    # dying lander holds it), nothing landed
                    stripe = int(rows[0]) // ps.layout.rows_per_stripe
                    ps.stripe_locks[stripe].acquire(block=False)
                self._die(self.local.rank)
            time.sleep(self.rng.uniform(0, 0.0005))
            real_land(rows, values, lr, step, lander)

        ps.slots.publish_ready = publish_ready  # type: ignore[method-assign]
        ps._order = order  # type: ignore[method-assign]
        ps._land = land  # type: ignore[method-assign]

    def learner(self, rank: int) -> None:
        self.local.rank = rank
        plan = self.deaths.get(rank)
        size = self.k * self.n  # rows per part
        try:
            for j in range(self.n):
                base = self.ps.start_gradient(rank)
                rows = [self.row_of[v] + part * size for v in range(1, base + 1) for part in range(_PARTS)]
                if (self.ps.params[0].numpy()[rows, 0] != -1).any():
                    self.unlanded_reads.append((rank, base))
                try:
                    time.sleep(self.delays[rank][j])  # computing
                    if plan is not None and plan[1] == j:
                        if plan[0] == "computing":
                            self._die(rank)  # in flight, never pushed: bound waiters must not hang
                        self.local.die_at = plan[0]
                    row = rank * self.n + j
                    parts = torch.tensor([row + part * size for part in range(_PARTS)])
                    self.ps.push(rank, Gradient(parts, [torch.ones((_PARTS, 1))]), base, j + 1, 1)
                finally:
                    if rank not in self.dead:
                        self.ps.end_gradient(rank)
        except (Stopped, _Death):
            return

    def run(self) -> bool:
        """Run to the end; returns whether recovery found the state consistent."""
        threads = [threading.Thread(target=self.learner, args=(r,), daemon=True) for r in range(self.k)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + _HANG_S
        try:
            while any(t.is_alive() for r, t in enumerate(threads) if r not in self.dead):
                assert time.monotonic() < deadline, f"hung: dead {self.dead}, states {self.ps.slots.states()}"
                if self.dead:  # the supervisor saw a death: survivors park, stripe waits give up
                    self.ps.server[C.DEATH] = 1
                    self.ps.server[C.PAUSE] = 1
                time.sleep(0.001)
            return self.ps.recover(sorted(self.dead))
        finally:
            self.the_end.set()


@st.composite
def _runs(draw: st.DrawFn) -> tuple[int, int, dict[int, tuple[str, int]], random.Random, int | None, int]:
    k = draw(st.integers(1, 8))
    n = draw(st.integers(1, 10))
    dying = draw(st.lists(st.integers(0, k - 1), max_size=2, unique=True))
    deaths = {
        r: (
            draw(st.sampled_from(["computing", "filling", "applying", "landing"])),
            draw(st.integers(0, n - 1)),
        )
        for r in dying
    }
    bound = draw(st.one_of(st.none(), st.integers(0, 4)))
    stripes = draw(st.sampled_from([0, 1, 3]))
    return k, n, deaths, random.Random(draw(st.integers(0, 2**32))), bound, stripes


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(_runs())
def test_every_completed_push_is_applied_exactly_once_within_the_bound_and_no_run_hangs(
    run_args: tuple[int, int, dict[int, tuple[str, int]], random.Random, int | None, int],
) -> None:
    k, n, deaths, rng, bound, stripes = run_args
    run = _Run(k, n, deaths, rng, bound, stripes)
    consistent = run.run()
    stats = run.ps.stats()
    table = run.ps.params[0]
    assert (table >= -1).all(), "a gradient was applied twice"
    # Every gradient given a version has landed, unless recovery refuses the state: a
    # lander died, or gave up waiting for a stripe the dead one held.
    parts = table.view(_PARTS, k * n)  # row i of each part: gradient i
    landed = int((parts == -1).all(dim=0).sum())
    assert stats.applied == len(run.staleness)
    assert landed == stats.applied if consistent else landed <= stats.applied
    if consistent:
        assert (parts == parts[0]).all(), "a gradient landed in part"
    assert not run.unlanded_reads, "a learner computed against a version that had not landed"
    if bound is not None:
        assert max(run.staleness, default=0) <= bound, run.staleness
    for cursors in run.cursors:  # a learner's gradients are applied in the order it pushed them
        assert cursors == sorted(set(cursors)), cursors
    if consistent:
        assert stats.applied == stats.pushed
        assert not (run.ps.slots.states() != 0).any(), "every slot is FREE after recovery"
        assert not run.ps.counters.array[1:, C.COMPUTING].any(), "no gradient is left in flight"
    else:
        # Only a learner that died holding the apply role or landing makes the state suspect;
        # what it left is exactly the pushes it had taken or could no longer be drained.
        assert any(kind in ("applying", "landing") for kind, _ in deaths.values())
        in_flight = int(((run.ps.slots.states() == READY) | (run.ps.slots.states() == APPLYING)).sum())
        # A lander that died landing a slot's gradient had already given it its version.
        landers = sum(kind == "landing" for kind, _ in deaths.values())
        assert in_flight - landers <= stats.pushed - stats.applied <= in_flight
    if not deaths:
        assert stats.pushed == k * n


def test_a_slot_moves_only_free_filling_ready_applying_free() -> None:
    ps = ParameterServer.create(
        [(torch.zeros((4, 2)), True)], OptimizerConfig(kind="sgd"), 2, 2, shared=False
    )
    ps.apply_lock.acquire()  # someone else holds the apply role: learner 0 must use its slot
    ps.push(0, Gradient(torch.tensor([1]), [torch.ones((1, 2))]), 0, 1, 1)
    assert list(ps.slots.states()) == [READY, 0]
    assert ps.stats().pushed == 1 and ps.stats().applied == 0
    ps.apply_lock.release()
    assert ps.drain() == 1
    assert list(ps.slots.states()) == [0, 0]
    assert ps.stats().applied == ps.stats().pushed == 1
    assert ps.counters.learner(0)[C.CURSOR] == 1


def test_a_learners_previous_gradient_is_applied_before_its_next_so_its_cursor_never_moves_back() -> None:
    ps = ParameterServer.create(
        [(torch.zeros((4, 2)), True)], OptimizerConfig(kind="sgd"), 2, 2, shared=False
    )
    ps.apply_lock.acquire()  # the role is taken: learner 0's first gradient waits in its slot
    ps.push(0, Gradient(torch.tensor([1]), [torch.ones((1, 2))]), 0, 1, 1)
    ps.apply_lock.release()  # nobody drained it; learner 0's next push takes the role itself
    ps.push(0, Gradient(torch.tensor([2]), [torch.ones((1, 2))]), 0, 2, 1)
    assert ps.stats().applied == ps.stats().pushed == 2
    assert ps.counters.learner(0)[C.CURSOR] == 2  # the position after both batches


@pytest.mark.parametrize(
    ("learners", "stalenesses", "steps"),
    [
        (1, [2, 0], [0.5, 1.0]),  # one or two learners: lr / staleness
        (2, [1, 3], [1.0, 1 / 3]),
        (4, [3, 6], [1.0, 0.5]),  # K learners: full steps up to K - 1, then (K - 1) / staleness
        (16, [15, 30], [1.0, 0.5]),
    ],
)
def test_staleness_beyond_k_minus_1_scales_the_learning_rate(
    learners: int, stalenesses: list[int], steps: list[float]
) -> None:
    ps = ParameterServer.create(
        [(torch.zeros((3, 1)), True)], OptimizerConfig(kind="sgd", lr=1.0), learners, 1, shared=False
    )
    ps.server[C.VERSION] = 40
    for row, staleness in enumerate(stalenesses):
        version = ps.version()
        ps.push(0, Gradient(torch.tensor([row]), [torch.ones((1, 1))]), version - staleness, row + 1, 1)
    assert ps.params[0].flatten().tolist() == pytest.approx([-s for s in steps] + [0.0])
    histogram = ps.stats().staleness_histogram
    assert sum(histogram) == len(stalenesses)


def _start_in_thread(ps: ParameterServer, rank: int) -> tuple[threading.Thread, list[object]]:
    """``ps.start_gradient(rank)`` in a thread; the list gets its version or Stopped."""
    outcome: list[object] = []

    def start() -> None:
        try:
            outcome.append(ps.start_gradient(rank))
        except Stopped as stopped:
            outcome.append(stopped)

    thread = threading.Thread(target=start, daemon=True)
    thread.start()
    return thread, outcome


def test_the_bound_makes_a_learner_wait_until_a_slower_ones_gradient_is_applied() -> None:
    opt = OptimizerConfig(kind="sgd", lr=1.0, staleness_bound=1)
    ps = ParameterServer.create([(torch.zeros((4, 1)), True)], opt, 2, 1, shared=False)
    slow_base = ps.start_gradient(0)  # learner 0 computes against version 0 ...
    for row in (1, 2):  # ... while learner 1 pushes one gradient, and reads again
        base = ps.start_gradient(1)
        ps.push(1, Gradient(torch.tensor([row]), [torch.ones((1, 1))]), base, row, 1)
        ps.end_gradient(1)
        if row == 1:
            # A second one now could be applied before learner 0's, making it 2 stale.
            thread, outcome = _start_in_thread(ps, 1)
            thread.join(timeout=0.3)
            assert thread.is_alive() and not outcome, "learner 1 read past the bound"
            ps.push(0, Gradient(torch.tensor([0]), [torch.ones((1, 1))]), slow_base, 1, 1)  # 1 stale
            ps.end_gradient(0)
            thread.join(timeout=5)
            assert outcome == [2], outcome  # admitted once learner 0's gradient was applied
    stats = ps.stats()
    assert stats.applied == stats.pushed == 3
    assert stats.staleness_histogram[:3] == [2, 1, 0]
    assert stats.wait_s >= 0.3


def test_a_learner_waiting_at_the_bound_leaves_on_pause() -> None:
    opt = OptimizerConfig(kind="sgd", lr=1.0, staleness_bound=0)
    ps = ParameterServer.create([(torch.zeros((2, 1)), True)], opt, 2, 1, shared=False)
    ps.start_gradient(0)  # learner 0 computes, and dies doing so: its gradient never comes
    thread, outcome = _start_in_thread(ps, 1)
    thread.join(timeout=0.2)
    assert thread.is_alive() and not outcome
    ps.server[C.PAUSE] = 1  # the supervisor saw the death
    thread.join(timeout=5)
    assert len(outcome) == 1 and isinstance(outcome[0], Stopped)
    assert ps.recover([0])
    assert not ps.counters.array[1:, C.COMPUTING].any()  # the dead learner's gradient is gone
    ps.server[C.PAUSE] = 0
    assert ps.start_gradient(1) == 0  # and the survivor goes on


def test_a_negative_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="staleness_bound must be at least 0"):
        OptimizerConfig(staleness_bound=-1)


def test_each_plateau_cut_multiplies_the_learning_rate_by_the_factor() -> None:
    assert [OptimizerConfig(lr=1.0, plateau_factor=0.5).rate(cuts) for cuts in range(4)] == [
        1.0,
        0.5,
        0.25,
        0.125,
    ]
    assert OptimizerConfig(lr=0.5).rate(7) == 0.5  # factor 1.0: constant


def test_the_server_applies_the_rate_of_its_shared_cut_counter() -> None:
    """The cut count lives in the server's shared counters, so whichever learner holds the
    apply role (another process, with K > 1) applies the same rate."""
    opt = OptimizerConfig(kind="sgd", lr=1.0, plateau_factor=0.5)
    ps = ParameterServer.create([(torch.zeros((2, 1)), True)], opt, 1, 1, shared=False)
    ps.push(0, Gradient(torch.tensor([0]), [torch.ones((1, 1))]), 0, 1, 1)
    ps.server[C.LR_CUTS] = 2
    ps.push(0, Gradient(torch.tensor([1]), [torch.ones((1, 1))]), 1, 2, 1)
    assert ps.params[0].flatten().tolist() == [-1.0, -0.25]


@pytest.mark.parametrize("kind", ["adam", "sgd"])
def test_snapshot_and_restore_round_trip(kind: str) -> None:
    ps = ParameterServer.create(
        [(torch.randn(5, 3), True), (torch.randn(2), False)], OptimizerConfig(kind=kind), 1, 5, shared=False
    )
    ps.push(0, Gradient(torch.tensor([0, 3]), [torch.ones((2, 3)), torch.ones(2)]), 0, 1, 1)
    saved = ps.snapshot()
    ps.push(0, Gradient(torch.tensor([1]), [torch.ones((1, 3)), torch.ones(2)]), 1, 2, 1)
    ps.restore(saved)
    assert ps.version() == 1
    assert all(torch.equal(a, b) for a, b in zip(ps.params, saved["params"], strict=True))
    assert all(torch.equal(a, b) for a, b in zip(ps.state, saved["state"], strict=True))
