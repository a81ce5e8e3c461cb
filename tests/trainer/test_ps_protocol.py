"""Property tests of the slot protocol: K learners push with random delays and random deaths.

Learners are threads here so that hypothesis can try many interleavings with K up to 8 in
a few seconds; a "death" is a learner that stops forever wherever it is, holding whatever it
holds (as a SIGKILLed process does). Real processes and real SIGKILLs are in test_ps_engine.
Each gradient i adds -1 to row i of a table (SGD, lr 1, no staleness scaling), so the table
itself records how many times each gradient was applied.
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
from trainer.ps.server import Gradient, OptimizerConfig, ParameterServer, Stopped
from trainer.ps.slots import APPLYING, READY

_HANG_S = 20.0  # a run that takes longer than this has hung: the protocol is broken


class _Death(Exception):
    pass


class _Run:
    """One protocol run: K learner threads, n pushes each, some learners planned to die."""

    def __init__(
        self, k: int, n: int, deaths: dict[int, tuple[str, int]], rng: random.Random, bound: int | None
    ) -> None:
        self.k, self.n, self.deaths, self.rng = k, n, deaths, rng
        table = torch.zeros((k * n, 1))
        opt = OptimizerConfig(kind="sgd", lr=1.0, staleness_aware=False, staleness_bound=bound)
        self.ps = ParameterServer.create([(table, True)], opt, k, max_rows=1, shared=False)
        self.delays = [[rng.uniform(0, 0.002) for _ in range(n)] for _ in range(k)]
        self.local = threading.local()
        self.the_end = threading.Event()
        self.dead: set[int] = set()
        self._patch()

    def _die(self, rank: int) -> None:
        self.dead.add(rank)
        self.the_end.wait()  # stopped forever, holding whatever we hold, until the test ends
        raise _Death

    def _patch(self) -> None:
        ps, real_publish, real_apply = self.ps, self.ps.slots.publish_ready, self.ps._apply

        def publish_ready(slot: int) -> None:
            if getattr(self.local, "die_at", None) == "filling":
                self._die(self.local.rank)  # dies FILLING: this push never completes
            real_publish(slot)

        def apply(*args: object) -> None:
            if getattr(self.local, "die_at", None) == "applying":
                self._die(self.local.rank)  # dies holding the apply role, before touching anything
            time.sleep(self.rng.uniform(0, 0.0005))
            real_apply(*args)  # type: ignore[arg-type]

        ps.slots.publish_ready = publish_ready  # type: ignore[method-assign]
        ps._apply = apply  # type: ignore[method-assign]

    def learner(self, rank: int) -> None:
        self.local.rank = rank
        plan = self.deaths.get(rank)
        try:
            for j in range(self.n):
                time.sleep(self.delays[rank][j])
                if plan is not None and plan[1] == j:
                    if plan[0] == "before":
                        self._die(rank)
                    self.local.die_at = plan[0]
                row = rank * self.n + j
                grad = Gradient(torch.tensor([row]), [torch.ones((1, 1))])
                self.ps.push(rank, grad, self.ps.version(), j + 1, 1)
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
                if self.dead:
                    self.ps.server[C.PAUSE] = 1  # the supervisor saw a death: survivors park
                time.sleep(0.001)
            return self.ps.recover(sorted(self.dead))
        finally:
            self.the_end.set()


@st.composite
def _runs(draw: st.DrawFn) -> tuple[int, int, dict[int, tuple[str, int]], random.Random, int | None]:
    k = draw(st.integers(1, 8))
    n = draw(st.integers(1, 10))
    dying = draw(st.lists(st.integers(0, k - 1), max_size=2, unique=True))
    deaths = {
        r: (draw(st.sampled_from(["before", "filling", "applying"])), draw(st.integers(0, n - 1)))
        for r in dying
    }
    bound = draw(st.one_of(st.none(), st.none(), st.integers(0, 2)))
    return k, n, deaths, random.Random(draw(st.integers(0, 2**32))), bound


@settings(max_examples=100, deadline=None)
@given(_runs())
def test_every_completed_push_is_applied_exactly_once_and_no_run_hangs(
    run_args: tuple[int, int, dict[int, tuple[str, int]], random.Random, int | None],
) -> None:
    k, n, deaths, rng, bound = run_args
    run = _Run(k, n, deaths, rng, bound)
    consistent = run.run()
    stats = run.ps.stats()
    table = run.ps.params[0]
    assert (table >= -1).all(), "a gradient was applied twice"
    assert int((table == -1).sum()) == stats.applied
    if consistent:
        assert stats.applied + stats.dropped == stats.pushed
        assert not (run.ps.slots.states() != 0).any(), "every slot is FREE after recovery"
        if bound is None:
            assert stats.applied == stats.pushed and stats.dropped == 0
    else:
        # Only a learner that died holding the apply role makes the state suspect; what it
        # left is exactly the pushes it had taken or could no longer be drained.
        assert any(kind == "applying" for kind, _ in deaths.values())
        in_flight = int(((run.ps.slots.states() == READY) | (run.ps.slots.states() == APPLYING)).sum())
        assert stats.pushed - stats.applied - stats.dropped == in_flight
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


def test_staleness_scales_the_learning_rate_and_the_bound_drops() -> None:
    opt = OptimizerConfig(kind="sgd", lr=1.0, staleness_bound=2)
    ps = ParameterServer.create([(torch.zeros((3, 1)), True)], opt, 1, 1, shared=False)
    ps.server[C.VERSION] = 10
    ps.push(0, Gradient(torch.tensor([0]), [torch.ones((1, 1))]), 8, 1, 1)  # staleness 2: lr / 2
    ps.push(0, Gradient(torch.tensor([1]), [torch.ones((1, 1))]), 0, 2, 1)  # staleness 11 > 2: dropped
    assert ps.params[0].flatten().tolist() == [-0.5, 0.0, 0.0]
    stats = ps.stats()
    assert (stats.pushed, stats.applied, stats.dropped) == (2, 1, 1)
    assert stats.staleness_histogram[2] == 1 and stats.staleness_histogram[5] == 1


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
