"""Striped servers: the layout, the row split, and concurrent landings that lose nothing."""

from __future__ import annotations

import multiprocessing
import threading

import pytest
import torch

from trainer.ps import counters as C
from trainer.ps.applier import Gradient, Stopped
from trainer.ps.optimizer import OptimizerConfig
from trainer.ps.server import ParameterServer
from trainer.ps.stripes import CHUNK_MIN, JOIN_MIN_ROWS, StripeLayout, default_stripes, land_in_turn


def test_the_table_is_cut_into_row_ranges_large_dense_parameters_into_flat_ranges() -> None:
    layout = StripeLayout([((10, 4), True), ((CHUNK_MIN,), False), ((3, 5), False), ((7,), False)], 3)
    assert layout.rows_per_stripe == 4  # stripes hold rows 0-3, 4-7, 8-9
    big = [[(p.start, p.end) for p in pieces if p.param == 1] for pieces in layout.pieces]
    assert big == [
        [(0, CHUNK_MIN // 3)],
        [(CHUNK_MIN // 3, 2 * CHUNK_MIN // 3)],
        [(2 * CHUNK_MIN // 3, CHUNK_MIN)],
    ]
    small = sorted((p.param, s) for s, pieces in enumerate(layout.pieces) for p in pieces if p.param != 1)
    assert [param for param, _ in small] == [2, 3]  # whole, each in one stripe
    assert len({stripe for _, stripe in small}) == 2  # in different stripes
    assert not layout.joinable  # a cut dense parameter: runs would only hold others up


def test_unsorted_rows_are_grouped_by_stripe_with_their_gradient_rows() -> None:
    layout = StripeLayout([((10, 2), True)], 3)
    assert layout.joinable
    rows = torch.tensor([9, 1, 5, 0, 9, 4])
    values = torch.arange(12, dtype=torch.float32).reshape(6, 2)
    split = layout.split_rows(rows, values, rows_sorted=False)
    assert split.cuts == [0, 2, 4, 6]
    assert split.rows.tolist() == [1, 0, 5, 4, 9, 9]  # stable within a stripe
    assert split.values[:, 0].tolist() == [2.0, 6.0, 4.0, 10.0, 0.0, 8.0]
    assert layout.touched(split.cuts, [2, 0, 1]) == [2, 0, 1]
    sparse = layout.split_rows(torch.tensor([8, 9]), torch.ones(2, 2), rows_sorted=True)
    assert sparse.cuts == [0, 0, 0, 2]
    assert layout.touched(sparse.cuts, [0, 1, 2]) == [2]
    assert layout.touched(None, [0, 1, 2]) == []


def test_two_learners_keep_the_unstriped_server_more_get_one_stripe_each() -> None:
    assert [default_stripes(k) for k in (1, 2, 3, 16)] == [0, 0, 3, 16]


@pytest.mark.parametrize("join_min", [0, JOIN_MIN_ROWS])
@pytest.mark.parametrize("dense", [CHUNK_MIN, 7], ids=["cut-dense", "runs"])
@pytest.mark.parametrize("stripes", [1, 3, 8])
def test_concurrent_striped_pushes_add_every_gradient_exactly_once(
    stripes: int, dense: int, join_min: int
) -> None:
    """Integer-valued gradients, so float sums in any order are exact: the table and the
    dense parameter must equal the sum of every pushed gradient (Hogwild would lose some).
    A small dense parameter leaves the layout joinable: stripes then land in runs (with
    ``join_min`` 0 any stripe joins one)."""
    k, pushes, rows = 4, 60, 50
    opt = OptimizerConfig(kind="sgd", lr=1.0, staleness_aware=False)
    ps = ParameterServer.create(
        [(torch.zeros(rows, 3), True), (torch.zeros(dense), False)],
        opt,
        k,
        40,
        shared=False,
        stripes=stripes,
        join_min=join_min,
    )
    generator = torch.Generator().manual_seed(7)
    plans = [
        [
            (
                torch.randint(
                    0, rows, (int(torch.randint(1, 40, (1,), generator=generator)),), generator=generator
                )
            )
            for _ in range(pushes)
        ]
        for _ in range(k)
    ]
    expected_table, expected_dense = torch.zeros(rows, 3), torch.zeros(dense)
    for plan in plans:
        for ids in plan:
            expected_table.index_add_(0, ids, torch.ones(len(ids), 3))  # duplicates add twice
            expected_dense += 1

    def learner(rank: int) -> None:
        for position, ids in enumerate(plans[rank], 1):
            base = ps.start_gradient(rank)
            ps.push(rank, Gradient(ids, [torch.ones(len(ids), 3), torch.ones(dense)]), base, position, 1)
            ps.end_gradient(rank)

    threads = [threading.Thread(target=learner, args=(rank,)) for rank in range(k)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert torch.equal(ps.params[0], -expected_table)
    assert torch.equal(ps.params[1], -expected_dense)
    stats = ps.stats()
    assert stats.applied == stats.pushed == stats.direct == k * pushes
    assert ps.landed() == ps.version() == k * pushes
    assert not ps.counters.array[1:, C.LANDING].any()


def test_a_striped_adam_server_lands_what_an_unstriped_one_applies() -> None:
    """One learner, the same gradients (sorted unique rows, as Adam's learners coalesce them):
    lazy Adam per stripe and per piece of a cut dense parameter gives the same values."""
    generator = torch.Generator().manual_seed(3)
    table, dense = torch.randn(30, 4, generator=generator), torch.randn(CHUNK_MIN, generator=generator)
    servers = [
        ParameterServer.create(
            [(table, True), (dense, False)],
            OptimizerConfig(kind="adam", lr=0.1),
            1,
            30,
            shared=False,
            stripes=s,
        )
        for s in (0, 3)
    ]
    for position in range(1, 6):
        ids = torch.randperm(30, generator=generator)[:12].sort().values
        values = [torch.randn(12, 4, generator=generator), torch.randn(CHUNK_MIN, generator=generator)]
        for ps in servers:
            ps.push(0, Gradient(ids, [v.clone() for v in values]), ps.start_gradient(0), position, 1)
            ps.end_gradient(0)
    plain, striped = servers
    for a, b in zip(plain.params + plain.state, striped.params + striped.state, strict=True):
        # the fused kernel's vector tails fall elsewhere in a piece: last-bit differences
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-8)
    assert striped.version() == plain.version() == 5


def test_a_lander_waiting_for_a_dead_learners_stripe_gives_up_and_recovery_refuses() -> None:
    opt = OptimizerConfig(kind="sgd", lr=1.0)
    ps = ParameterServer.create([(torch.zeros(4, 1), True)], opt, 2, 1, shared=False, stripes=2)
    ps.stripe_locks[0].acquire()  # learner 0 died landing in stripe 0
    ps.counters.learner(0)[C.LANDING] = 1
    ps.server[C.VERSION] = 1
    outcome: list[object] = []

    def push() -> None:
        try:
            ps.push(1, Gradient(torch.tensor([0]), [torch.ones(1, 1)]), ps.start_gradient(1), 1, 1)
        except Stopped as stopped:
            outcome.append(stopped)

    thread = threading.Thread(target=push, daemon=True)
    thread.start()
    thread.join(timeout=0.2)
    assert thread.is_alive(), "a lander must wait for a stripe while its holder may be alive"
    ps.server[C.PAUSE] = 1
    thread.join(timeout=0.2)
    assert thread.is_alive(), "PAUSE alone (a round end) must not make a lander give up"
    ps.server[C.DEATH] = 1
    thread.join(timeout=5)
    assert len(outcome) == 1 and isinstance(outcome[0], Stopped)
    assert ps.counters.learner(1)[C.LANDING] == 2  # ordered, not landed
    assert ps.landed() == 0  # nothing past what learner 0 was landing counts as seen
    assert not ps.recover([0])  # partly landed parameters: only a checkpoint is trusted


def test_stripes_are_refused_on_cuda() -> None:
    with pytest.raises(ValueError, match="stripes are for learner processes on CPU"):
        ParameterServer.create(
            [(torch.zeros(2, 1), True)],
            OptimizerConfig(),
            2,
            1,
            shared=False,
            device=torch.device("cuda"),
            stripes=2,
        )


def test_a_striped_servers_slots_carry_no_gradient_payload() -> None:
    """Its pushers land their own gradients, so the ring holds words and headers only: no
    copy of the model per learner (420 MB for a 6.6 M-parameter model at K = 16)."""
    params = [(torch.zeros(100, 4), True), (torch.zeros(50, 4), False)]
    opt = OptimizerConfig(kind="sgd", lr=1.0)
    striped = ParameterServer.create(params, opt, 4, 32, shared=False, stripes=3).handles.slots
    assert striped.values == [] and striped.ids.numel() == 0
    plain = ParameterServer.create(params, opt, 4, 32, shared=False).handles.slots
    assert [tuple(v.shape) for v in plain.values] == [(4, 32, 4), (4, 50, 4)]


class _ScriptedLock:
    """A stripe lock another lander holds for the first ``busy`` attempts to take it."""

    def __init__(self, busy: int) -> None:
        self.busy = busy

    def acquire(self, block: bool = True, timeout: float | None = None) -> bool:
        if self.busy:
            self.busy -= 1
            return False
        return True

    def release(self) -> None:
        pass


def test_a_run_never_spans_a_stripe_landed_in_an_earlier_pass() -> None:
    """Stripes 0 and 2 taken at first: the first pass lands stripe 1 alone, the second holds
    0 and finds 2 free. Joining them in one run would land stripe 1's row a second time."""
    opt = OptimizerConfig(kind="sgd", lr=1.0, staleness_aware=False)
    ps = ParameterServer.create([(torch.zeros(6, 1), True)], opt, 1, 8, shared=False, stripes=3, join_min=1)
    assert ps.layout is not None and ps.layout.joinable and ps.layout.rows_per_stripe == 2
    ps.stripe_locks[:] = [_ScriptedLock(1), _ScriptedLock(0), _ScriptedLock(2)]
    ps._land(torch.tensor([4, 2, 0]), [-torch.ones(3, 1)], 1.0, 1, 0)
    assert ps.params[0][:, 0].tolist() == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    assert [lock.busy for lock in ps.stripe_locks] == [0, 0, 0]  # both passes happened


@pytest.mark.parametrize(
    ("join_min", "runs"), [(0, [[0, 1, 2, 3]]), (8, [[0], [1, 2], [3]]), (10, [[0], [1], [2], [3]])]
)
def test_only_stripes_with_rows_enough_join_a_run(join_min: int, runs: list[list[int]]) -> None:
    """Stripes 0-3 hold 1, 8, 9 and 1 of the gradient's rows: a stripe with fewer than
    ``join_min`` neither starts a run nor joins one, so a gradient with a few rows in each
    stripe does not hold them all through one call."""
    landed: list[list[int]] = []
    locks = [multiprocessing.get_context("spawn").Lock() for _ in range(4)]  # the server's kind
    land_in_turn(
        locks,
        [0, 1, 2, 3],
        lambda held: landed.append(list(held)),
        [0, 1, 9, 18, 19],
        lambda: None,
        64,
        join_min,
    )
    assert landed == runs
    assert all(lock.acquire(block=False) for lock in locks)  # every one released
