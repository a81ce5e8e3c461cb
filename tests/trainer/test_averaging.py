"""Epoch iterate averaging: where the snapshots fall, their sum, and a training's use of them."""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from trainer import checkpoint as ckpt
from trainer import session
from trainer.averaging import IterateSum, SnapshotPlan
from trainer.data import LabelledData
from trainer.engine import train
from trainer.errors import TrainingStopped
from trainer.hparams import HParams
from trainer.inference import WEIGHTS_FILE
from trainer.ps.pool import InProcessPool


def test_an_epoch_of_690_steps_takes_its_snapshots_every_87_and_at_its_end() -> None:
    plan = SnapshotPlan((690 * 16 - 5,), 16, 8)

    assert plan.every == 87 and plan.count == 8
    assert [plan.ends(i)[0] // 16 for i in range(1, 8)] == [87 * i for i in range(1, 8)]
    assert plan.ends(8) == [690 * 16 - 5]  # the shard's end: its last mini-batch is short


def test_an_epoch_of_fewer_steps_than_snapshots_takes_one_after_each_step() -> None:
    plan = SnapshotPlan((10, 9), 4, 8)

    assert plan.count == 3
    assert [plan.ends(i) for i in (1, 2, 3)] == [[4, 4], [8, 8], [10, 9]]


def test_without_averaging_a_round_runs_to_the_shards_end() -> None:
    plan = SnapshotPlan((100, 99), 16, 0)

    assert plan.count == 1 and plan.next_ends([0, 0]) == [100, 99] == plan.next_ends([48, 32])


@given(
    shard=st.integers(0, 3000),
    learners=st.integers(1, 5),
    batch=st.integers(1, 40),
    snapshots=st.integers(0, 12),
)
def test_snapshots_fall_on_whole_mini_batches_and_the_last_at_every_shards_end(
    shard: int, learners: int, batch: int, snapshots: int
) -> None:
    """Each learner's shard is every ``learners``-th row of the epoch, so lengths differ by at most one."""
    rows = shard * learners + learners // 2
    shards = tuple(len(range(rank, rows, learners)) for rank in range(learners))
    plan = SnapshotPlan(shards, batch, snapshots)
    ends = [plan.ends(i) for i in range(1, plan.count + 1)]

    assert plan.count <= max(snapshots, 1)
    assert ends[-1] == list(shards)
    for earlier, later in zip(ends, ends[1:], strict=False):
        assert all(a <= b for a, b in zip(earlier, later, strict=True))
        assert any(a < b for a, b in zip(earlier, later, strict=True))  # no snapshot taken twice
    for end in ends:
        assert all(e % batch == 0 or e == s for e, s in zip(end, shards, strict=True))
    positions = [0] * learners
    for end in ends:  # rounds from the epoch's start stop at each snapshot in turn
        assert plan.next_ends(positions) == end
        positions = end


def test_a_learner_at_the_snapshot_waits_there_for_one_that_parked_before_it() -> None:
    plan = SnapshotPlan((64, 64), 4, 4)

    assert plan.next_ends([16, 8]) == [16, 16]
    assert plan.next_ends([16, 16]) == [32, 32]


def test_the_mean_is_held_for_the_block_then_the_last_iterate_comes_back() -> None:
    params = [torch.zeros(3), torch.zeros(2, 2)]
    sums = IterateSum()
    for value in (1.0, 2.0, 6.0):
        for p in params:
            p.fill_(value)
        sums.add(params)

    with sums.mean_in(params, keep=lambda: False):
        assert all(torch.equal(p, torch.full_like(p, 3.0)) for p in params)
    assert all(torch.equal(p, torch.full_like(p, 6.0)) for p in params)
    assert sums.count == 0 and sums.as_dict()["sums"] is None


def test_the_next_epoch_sums_afresh_in_the_same_buffers() -> None:
    params = [torch.zeros(3)]
    sums = IterateSum()
    buffers = []
    for epoch_values in ((1.0, 2.0), (10.0, 20.0, 30.0)):
        for value in epoch_values:
            params[0].fill_(value)
            sums.add(params)
        assert sums.sums is not None
        buffers.append(sums.sums[0].data_ptr())
        with sums.mean_in(params, keep=lambda: False):
            mean = params[0].clone()
    assert torch.equal(mean, torch.full((3,), 20.0)) and torch.equal(params[0], torch.full((3,), 30.0))
    assert buffers[0] == buffers[1]  # no table allocated per epoch


def test_a_failure_while_the_mean_is_held_leaves_the_iterate_and_the_sum() -> None:
    params = [torch.zeros(2)]
    sums = IterateSum()
    for value in (2.0, 4.0):
        params[0].fill_(value)
        sums.add(params)

    with pytest.raises(RuntimeError), sums.mean_in(params, keep=lambda: False):
        raise RuntimeError("validation failed")
    assert torch.equal(params[0], torch.full((2,), 4.0))
    assert sums.count == 2 and sums.sums is not None and torch.equal(sums.sums[0], torch.full((2,), 6.0))


def test_a_finished_training_keeps_the_mean() -> None:
    params = [torch.ones(4)]
    sums = IterateSum()
    sums.add(params)
    params[0].fill_(3.0)
    sums.add(params)

    with sums.mean_in(params, keep=lambda: True):
        pass
    assert torch.equal(params[0], torch.full((4,), 2.0))


def test_a_checkpointed_sum_comes_back_equal_and_an_absent_one_is_empty() -> None:
    sums = IterateSum()
    sums.add([torch.arange(4.0)])
    sums.add([torch.arange(4.0)])

    back = IterateSum.from_dict(sums.as_dict(), torch.device("cpu"))

    assert back.count == 2 and back.sums is not None and torch.equal(back.sums[0], 2 * torch.arange(4.0))
    assert IterateSum.from_dict(None, torch.device("cpu")).count == 0
    assert IterateSum.from_dict(IterateSum().as_dict(), torch.device("cpu")).sums is None


def test_a_training_validates_each_epochs_mean_and_goes_on_from_its_last_iterate(
    tmp_path: Path, small_data: LabelledData, quick_hparams: HParams, monkeypatch: pytest.MonkeyPatch
) -> None:
    """48 training rows in mini-batches of 4: 12 steps an epoch, a snapshot after every second."""
    hparams = dataclasses.replace(quick_hparams, checkpoint_every_updates=1 << 40, average_snapshots=8)
    rounds: list[tuple[int, list[int], list[torch.Tensor]]] = []
    epoch_ends: list[tuple[int, list[torch.Tensor]]] = []
    after_epoch_ends: list[list[torch.Tensor]] = []
    real_run_round, real_end_epoch = InProcessPool.run_round, session._end_epoch

    def run_round(self, epoch, positions, ends, tick):  # type: ignore[no-untyped-def]
        result = real_run_round(self, epoch, positions, ends, tick)
        rounds.append((epoch, result.positions, [p.detach().clone() for p in self.ps.params]))
        return result

    def end_epoch(model, state, prepared, hparams):  # type: ignore[no-untyped-def]
        epoch_ends.append((state.epoch, [p.detach().clone() for p in model.parameters()]))
        real_end_epoch(model, state, prepared, hparams)

    monkeypatch.setattr(InProcessPool, "run_round", run_round)
    monkeypatch.setattr(session, "_end_epoch", end_epoch)
    real_mean_in = IterateSum.mean_in

    def mean_in(self, params, keep):  # type: ignore[no-untyped-def]
        with real_mean_in(self, params, keep):
            yield
        after_epoch_ends.append([p.detach().clone() for p in params])

    monkeypatch.setattr(IterateSum, "mean_in", contextmanager(mean_in))
    result = train(small_data, workdir=tmp_path / "work", out_dir=tmp_path / "out", hparams=hparams)

    assert [positions for epoch, positions, _ in rounds if epoch == 1] == [[8], [16], [24], [32], [40], [48]]
    assert len(epoch_ends) == result.epochs >= 2
    for (epoch, mean), after in zip(epoch_ends, after_epoch_ends, strict=True):
        iterates = [params for e, _, params in rounds if e == epoch]
        for i, held in enumerate(mean):
            torch.testing.assert_close(held, sum(it[i] for it in iterates) / len(iterates), rtol=0, atol=1e-6)
        last = iterates[-1] if epoch < result.epochs else mean  # the last epoch's mean is the model
        assert all(torch.equal(a, b) for a, b in zip(after, last, strict=True))


def test_a_checkpoint_written_before_averaging_resumes_to_the_last_iterate_it_trained(
    tmp_path: Path, small_data: LabelledData, quick_hparams: HParams
) -> None:
    """A job checkpointed by the version before averaging and resumed after an upgrade trains
    on as it began: its hyper-parameters have no ``average_snapshots`` and its early-stopping
    state no snapshot sum."""
    last_iterate = dataclasses.replace(quick_hparams, average_snapshots=0)
    train(small_data, workdir=tmp_path / "ref-work", out_dir=tmp_path / "ref", hparams=last_iterate)
    calls = iter(range(100))
    with pytest.raises(TrainingStopped):
        train(
            small_data,
            workdir=tmp_path / "work",
            out_dir=tmp_path / "out",
            hparams=last_iterate,
            should_stop=lambda: next(calls) >= 6,
        )
    saved = ckpt.load_latest(tmp_path / "work")
    assert saved is not None
    del saved[ckpt.HPARAMS]["average_snapshots"], saved[ckpt.EARLY_STOP]["iterates"]
    ckpt.save(tmp_path / "work", saved)

    resumed = train(small_data, workdir=tmp_path / "work", out_dir=tmp_path / "out", hparams=quick_hparams)

    assert resumed.resumed == 1
    expected = torch.load(tmp_path / "ref" / WEIGHTS_FILE, weights_only=True)
    actual = torch.load(tmp_path / "out" / WEIGHTS_FILE, weights_only=True)
    assert all(torch.equal(expected[key], actual[key]) for key in expected)
