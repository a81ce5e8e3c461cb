"""The CUDA-graph learner (trainer.ps.graph): its packing and step against the K = 1 loop.

The packing and the step program are plain numpy and torch, so they are checked here on the
CPU, step for step, against the loop the CPU runs (InProcessPool: TextClassifierTask and the
server's SGD apply). The pool itself captures CUDA graphs: its tests skip without CUDA.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from trainer.features import Bags
from trainer.model import ModelConfig, TextClassifier
from trainer.ps import counters as C
from trainer.ps.graph import STEPS_PER_GRAPH, GraphPool, Products, pack_chunk, padded_width, sgd_step
from trainer.ps.learner import ShardData
from trainer.ps.optimizer import OptimizerConfig
from trainer.ps.pool import InProcessPool, RoundResult
from trainer.ps.server import ParameterServer
from trainer.step import DataCursor, TextClassifierTask, model_parameters

ROWS, TABLE, DIM, CLASSES, LR, DIRECT_SCALE = 203, 97, 8, 5, 0.5, 3.0


def _data(multi_label: bool = False, seed: int = 3) -> tuple[Bags, np.ndarray]:
    """Bags of 0 to 40 ids (some empty), duplicate ids within a bag, random weights of unit
    L2 norm per bag (as the featurizer's), so that training stays well-conditioned and two
    orders of float additions stay close."""
    gen = np.random.default_rng(seed)
    lengths = gen.integers(0, 41, ROWS)
    lengths[[5, 17]] = 0
    ids = gen.integers(0, TABLE, int(lengths.sum()))
    weights = gen.random(len(ids), dtype=np.float32)
    offsets = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    bag_of_id = np.repeat(np.arange(ROWS), lengths)
    norms = np.sqrt(np.bincount(bag_of_id, weights=weights**2, minlength=ROWS))
    weights /= norms[bag_of_id]  # unit L2 per bag, as the featurizer's TF-IDF
    targets: np.ndarray = (
        (gen.random((ROWS, CLASSES)) < 0.3).astype(np.uint8)
        if multi_label
        else gen.integers(0, CLASSES, ROWS)
    )
    return Bags(ids.astype(np.int64), weights, offsets), targets


def _server(device: torch.device, direct: int = 0) -> ParameterServer:
    """``direct``: the model reads the entries of the table's last ``direct`` rows through a
    direct path too (an encoder model's, trainer.model), started off zero here."""
    model = TextClassifier(
        ModelConfig(TABLE, DIM, CLASSES, direct, DIRECT_SCALE if direct else 0.0),
        embedding_init=0.1,
        output_init=1.0,
        generator=torch.Generator().manual_seed(0),
    )
    if model.direct is not None:
        with torch.no_grad():
            model.direct.weight.uniform_(-1, 1, generator=torch.Generator().manual_seed(1))
    return ParameterServer.create(
        model_parameters(model), OptimizerConfig(kind="sgd", lr=LR), 1, 4096, shared=False, device=device
    )


def _reference(
    bags: Bags, targets: np.ndarray, batch: int, class_weights: torch.Tensor | None, direct: int = 0
) -> tuple[ParameterServer, RoundResult]:
    """One epoch of the CPU's K = 1 loop."""
    ps = _server(torch.device("cpu"), direct)
    task = TextClassifierTask(
        unique_rows=False,
        multi_label=targets.ndim == 2,
        class_weights=class_weights,
        direct_scale=DIRECT_SCALE if direct else 0.0,
        sentence_width=direct,
    )
    pool = InProcessPool(ps, task, ShardData.of(bags, targets, shared=False), batch, seed=11)
    return ps, pool.run_round(1, [0], [ROWS], lambda: False)


def _eager(
    bags: Bags,
    targets: np.ndarray,
    batch: int,
    class_weights: np.ndarray | None,
    products: Products = Products(),
    direct: int = 0,
) -> tuple[list[torch.Tensor], list[float]]:
    """The same epoch as packed chunks, each step run eagerly on the CPU."""
    ps = _server(torch.device("cpu"), direct)
    params = [p.data for p in ps.params]
    shard = DataCursor(epoch=1, seed=11).shard(len(bags), 0, 1)
    position, losses = 0, []
    loss = torch.zeros(())
    while position < len(shard):
        chunk = pack_chunk(bags, targets, shard, position, batch, LR, class_weights)
        for step in range(STEPS_PER_GRAPH):  # the empty steps too, as a replay runs them
            before = [p.clone() for p in params]
            sgd_step(
                params,
                torch.from_numpy(chunk.ints[step]),
                torch.from_numpy(chunk.floats[step]),
                chunk.width,
                batch,
                loss,
                products,
                DIRECT_SCALE if direct else 0.0,
            )
            if step < chunk.steps:
                losses.append(float(loss))
            else:  # an empty step moves nothing and costs nothing
                assert float(loss) == 0.0
                assert all(torch.equal(a, b) for a, b in zip(before, params, strict=True))
        position = int(chunk.ends[-1])
    return params, losses


@pytest.mark.parametrize("batch", [1, 4, 16])
@pytest.mark.parametrize("balanced", [False, True])
@pytest.mark.parametrize("products", [Products(), Products(swap_logits=True, swap_hidden=True)], ids=str)
@pytest.mark.parametrize("direct", [0, 9])
def test_packed_steps_train_as_the_k1_loop(
    batch: int, balanced: bool, products: Products, direct: int
) -> None:
    """``direct``: the model has a direct path over the entries of the table's last 9 rows."""
    bags, targets = _data()
    class_weights = torch.tensor([0.5, 1.0, 2.0, 1.5, 3.0]) if balanced else None
    ps, result = _reference(bags, targets, batch, class_weights, direct)
    params, losses = _eager(
        bags,
        targets,
        batch,
        None if class_weights is None else class_weights.double().numpy(),
        products,
        direct,
    )

    assert len(losses) == math.ceil(ROWS / batch) == ps.version()  # the last batch is a short one
    assert math.isclose(sum(losses), result.loss_sum, rel_tol=1e-5)
    for mine, reference in zip(params, ps.params, strict=True):
        torch.testing.assert_close(mine, reference, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("direct", [0, 9])
def test_packed_multi_label_steps_train_as_the_k1_loop(direct: int) -> None:
    bags, targets = _data(multi_label=True)
    ps, result = _reference(bags, targets, 4, None, direct)
    params, losses = _eager(bags, targets, 4, None, direct=direct)

    assert len(params) == 3 + bool(direct)
    assert math.isclose(sum(losses), result.loss_sum, rel_tol=1e-5)
    for mine, reference in zip(params, ps.params, strict=True):
        torch.testing.assert_close(mine, reference, rtol=1e-5, atol=1e-6)


def test_ids_are_padded_to_one_of_four_widths_per_doubling() -> None:
    widths = [padded_width(n) for n in range(1, 4097)]
    assert widths[:16] == [16] * 16 and padded_width(17) == 20 and padded_width(384) == 384
    assert all(n <= w <= max(16, n * 1.25) for n, w in enumerate(widths, start=1))
    assert len(set(widths)) == 1 + 4 * 8  # 16, then four per doubling up to 4,096


def test_a_chunk_pads_each_step_with_its_own_ids_and_knows_where_each_step_ends() -> None:
    bags, targets = _data()
    shard = np.arange(ROWS)
    chunk = pack_chunk(bags, targets, shard, 190, 4, LR, None)  # 13 rows left: 4 steps, the last of 1

    lengths = np.diff(np.append(bags.offsets, len(bags.ids)))
    per_step = [int(lengths[190 + 4 * s : 194 + 4 * s].sum()) for s in range(4)]
    assert chunk.steps == 4
    assert chunk.ends.tolist() == [194, 198, 202, 203]
    assert chunk.samples.tolist() == [4, 4, 4, 1]
    assert chunk.ids.tolist() == per_step
    assert chunk.width == padded_width(max(per_step))
    for step, count in enumerate(per_step):  # the padding repeats the step's ids, weighing 0
        ids = chunk.ints[step, : chunk.width]
        assert set(ids[count:]) <= set(ids[:count]) and not chunk.floats[step, count : chunk.width].any()
    assert chunk.ints.shape == (STEPS_PER_GRAPH, 2 * chunk.width + 8)
    # a step's rows share its loss (padding has no share) and its update at -lr, and the
    # targets' column undoes the rate
    shares, rates, undo = (chunk.floats[:, chunk.width + 4 * i : chunk.width + 4 * i + 4] for i in range(3))
    np.testing.assert_allclose(shares[:4].sum(axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(rates, -LR * shares)
    np.testing.assert_array_equal(undo, -rates)
    assert not shares[3, 1:].any() and not chunk.floats[4:].any()


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: no GPU on this machine")


def _graph_pool(bags: Bags, targets: np.ndarray, batch: int) -> tuple[ParameterServer, GraphPool]:
    device = torch.device("cuda")
    ps = _server(device)
    return ps, GraphPool(ps, ShardData.of(bags, targets, shared=False), batch, seed=11, device=device)


@cuda
@pytest.mark.gpu
@pytest.mark.parametrize("multi_label", [False, True])
def test_the_graph_pool_trains_an_epoch_as_the_k1_loop_and_counts_every_step_once(multi_label: bool) -> None:
    bags, targets = _data(multi_label=multi_label)
    reference, expected = _reference(bags, targets, 4, None)
    ps, pool = _graph_pool(bags, targets, 4)

    result = pool.run_round(1, [0], [ROWS], lambda: False)

    stats = ps.stats()
    assert result.positions == [ROWS] and result.done == [True] and result.nonfinite is None
    assert stats.pushed == stats.applied == stats.direct == ps.version() == math.ceil(ROWS / 4)
    assert stats.staleness_histogram[0] == stats.applied
    assert ps.counters.learner(0)[C.SAMPLES] == ROWS
    assert result.loss_count == expected.loss_count
    assert math.isclose(result.loss_sum, expected.loss_sum, rel_tol=1e-4)
    for mine, theirs in zip(ps.params, reference.params, strict=True):
        torch.testing.assert_close(mine.cpu(), theirs, rtol=1e-4, atol=1e-5)


@cuda
@pytest.mark.gpu
def test_a_round_parked_by_tick_resumes_where_it_stopped() -> None:
    bags, targets = _data()
    whole, pool = _graph_pool(bags, targets, 2)
    pool.run_round(1, [0], [ROWS], lambda: False)
    ps, parted = _graph_pool(bags, targets, 2)
    ticks = iter([False, True])

    first = parted.run_round(1, [0], [ROWS], lambda: next(ticks, True))
    second = parted.run_round(1, first.positions, [ROWS], lambda: False)

    assert 0 < first.positions[0] < ROWS and not first.done[0]
    assert first.positions[0] % (2 * STEPS_PER_GRAPH) == 0  # a park ends a chunk
    assert second.positions == [ROWS] and second.done == [True]
    assert ps.version() == whole.version() == math.ceil(ROWS / 2)
    for mine, theirs in zip(ps.params, whole.params, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-5)  # atomic adds: any order


@cuda
@pytest.mark.gpu
def test_a_round_ends_at_its_end_position_mid_chunk_and_the_next_goes_on_from_there() -> None:
    """A snapshot's position (trainer.averaging) cuts a chunk short; the epoch trains as one round."""
    bags, targets = _data()
    whole, pool = _graph_pool(bags, targets, 2)
    pool.run_round(1, [0], [ROWS], lambda: False)
    ps, parted = _graph_pool(bags, targets, 2)
    end = 2 * (STEPS_PER_GRAPH + 5)

    first = parted.run_round(1, [0], [end], lambda: False)
    versions = ps.version()
    second = parted.run_round(1, first.positions, [ROWS], lambda: False)

    assert first.positions == [end] and first.done == [False] and versions == end // 2
    assert second.positions == [ROWS] and second.done == [True]
    assert ps.version() == whole.version() == math.ceil(ROWS / 2)
    for mine, theirs in zip(ps.params, whole.params, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-5)  # atomic adds: any order


@cuda
@pytest.mark.gpu
def test_a_non_finite_loss_ends_the_round_before_its_step() -> None:
    bags, targets = _data()
    shard = DataCursor(epoch=1, seed=11).shard(ROWS, 0, 1)
    poisoned = 70  # the shard position of a row whose weights overflow the loss
    row = int(shard[poisoned])
    start = int(bags.offsets[row])
    bags.weights[start] = np.float32("inf")
    assert bags.offsets[row + 1] > start  # the row has ids
    ps, pool = _graph_pool(bags, targets, 4)

    result: RoundResult = pool.run_round(1, [0], [ROWS], lambda: False)

    assert result.nonfinite is not None and not math.isfinite(result.nonfinite)
    assert result.positions == [poisoned - poisoned % 4]  # the step that met it is not counted
    assert ps.version() == poisoned // 4 == ps.stats().applied
