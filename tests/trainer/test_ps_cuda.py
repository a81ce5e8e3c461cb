"""The CUDA path: one learner replaying CUDA graphs (SGD), or learners as streams of one
process sharing the GPU (Adam, or K > 1 asked for). Skipped without CUDA."""

from __future__ import annotations

import threading
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch

from trainer.data import LabelledData
from trainer.engine import train
from trainer.errors import TrainingStopped
from trainer.features import Featurizer, FeaturizerConfig
from trainer.hparams import HParams
from trainer.inference import LoadedModel
from trainer.model import ModelConfig, TextClassifier
from trainer.ps.applier import Gradient
from trainer.ps.cuda import StreamPool
from trainer.ps.learner import ShardData
from trainer.ps.optimizer import OptimizerConfig
from trainer.ps.server import ParameterServer
from trainer.step import TextClassifierTask, model_parameters

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: no GPU on this machine"),
]


@pytest.mark.parametrize("learners", [1, 4])
def test_cuda_learners_apply_every_pushed_gradient_once_and_the_model_loads_on_cpu(
    tmp_path: Path, small_data: LabelledData, learners: int
) -> None:
    hparams = HParams(batch_size=4, min_updates=0, max_epochs=20, min_validation_rows=10**9, embedding_dim=8)
    result = train(
        small_data,
        workdir=tmp_path / "w",
        out_dir=tmp_path / "m",
        hparams=hparams,
        learners=learners,
        device="cuda",
    )
    assert result.learners == learners
    assert result.ps["applied"] == result.ps["pushed"] == result.applied_updates
    if learners == 1:  # the graph learner: every gradient direct, at staleness 0
        histogram = result.ps["staleness_histogram"]
        assert result.ps["direct"] == histogram[0] == result.applied_updates  # type: ignore[index]
    assert result.metrics["accuracy"] >= 0.9  # type: ignore[operator]
    assert LoadedModel.load(tmp_path / "m").classify(["play a jazz song"])[0][0][0] == "music"


def test_auto_learners_on_cuda_are_one_graph_learner_under_sgd_and_streams_under_adam(
    tmp_path: Path, small_data: LabelledData
) -> None:
    base = HParams(batch_size=4, min_updates=0, max_epochs=2, min_validation_rows=10**9, cross_fit_folds=0)
    for optimizer, expected in (("sgd", 1), ("adam", 4)):
        result = train(
            small_data,
            workdir=tmp_path / optimizer,
            out_dir=tmp_path / f"m-{optimizer}",
            hparams=replace(base, optimizer=optimizer),
            learners=0,
            device="cuda",
        )
        assert result.learners == expected


def test_a_stopped_cuda_job_resumes_to_the_model_of_an_uninterrupted_one(
    tmp_path: Path, small_data: LabelledData
) -> None:
    """Graph learner: the stop is seen between chunks, the checkpoint holds the device's
    parameters, and the resumed job ends where the uninterrupted one does."""
    hparams = HParams(batch_size=4, min_updates=0, max_epochs=6, min_validation_rows=10**9, cross_fit_folds=0)
    whole = train(
        small_data, workdir=tmp_path / "w1", out_dir=tmp_path / "m1", hparams=hparams, device="cuda"
    )
    ticks = iter(range(10**6))
    with pytest.raises(TrainingStopped):
        train(
            small_data,
            workdir=tmp_path / "w2",
            out_dir=tmp_path / "m2",
            hparams=hparams,
            device="cuda",
            should_stop=lambda: next(ticks) >= 3,
        )
    resumed = train(
        small_data, workdir=tmp_path / "w2", out_dir=tmp_path / "m2", hparams=hparams, device="cuda"
    )

    assert resumed.resumed == 1
    assert resumed.applied_updates == whole.applied_updates == resumed.ps["applied"]
    texts = ["play a jazz song", "what is the weather", "book a table", "turn it up"]
    expected = LoadedModel.load(tmp_path / "m1").probabilities(texts)
    np.testing.assert_allclose(LoadedModel.load(tmp_path / "m2").probabilities(texts), expected, atol=1e-4)


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_applies_from_different_streams_never_overlap(kind: str) -> None:
    """A dense parameter's update (and Adam's moments) is a read-modify-write: were two learners'
    applies, queued on their own streams, to run at the same time, one update would be lost.
    Each apply waits on the GPU for the one before it, so the sum of K x N unit steps is exact
    (SGD), or the step count matches a sequential run (Adam's bias correction: every update
    of ones moves each element by the same amount)."""
    device, learners, pushes, width = torch.device("cuda"), 4, 200, 1 << 22  # long kernels
    opt = OptimizerConfig(kind=kind, lr=1.0 if kind == "sgd" else 1e-3, staleness_aware=False)
    ps = ParameterServer.create([(torch.zeros(width), False)], opt, learners, 0, shared=False, device=device)
    streams = [torch.cuda.Stream(device=device) for _ in range(learners)]
    no_rows = torch.empty(0, dtype=torch.long, device=device)

    def learner(rank: int) -> None:
        with torch.cuda.stream(streams[rank]):
            for i in range(pushes):
                grad = torch.ones(width, device=device)
                ps.push(rank, Gradient(no_rows, [grad]), ps.version(), i + 1, 1)

    threads = [threading.Thread(target=learner, args=(rank,)) for rank in range(learners)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    torch.cuda.synchronize()

    assert ps.stats().applied == learners * pushes
    result = ps.params[0]
    if kind == "sgd":
        assert bool(result.eq(-learners * pushes).all())
    else:
        expected = torch.zeros(1)
        sequential = ParameterServer.create([(expected, False)], opt, 1, 0, shared=False)
        for i in range(learners * pushes):
            sequential.push(0, Gradient(torch.empty(0, dtype=torch.long), [torch.ones(1)]), i, i + 1, 1)
        assert torch.allclose(result.cpu(), sequential.params[0].expand(width), rtol=1e-5, atol=1e-7)


def test_the_cuda_benchmark_reports_every_mode_side_by_side() -> None:
    """benchmarks/ps_cuda_bench.py as a user runs it: single, graph and the PS on one GPU."""
    from benchmark_runs import run_benchmark

    (report,) = run_benchmark(
        "ps_cuda_bench.py", "--json", "--learners", "2", "--batches", "4", "--seconds", "0.2"
    )
    rows = {(row["model"], row["mode"]): row for row in report["results"]}
    modes = {(m, mode) for m in ("sparse", "dense") for mode in ("single", "graph", "ps")}
    assert set(rows) == modes | {("sparse", "ps-graph")}  # the graph learner: the production model
    assert all(row["samples_per_s"] > 0 for row in rows.values())
    assert all(0 <= rows[(m, "ps")]["apply_busy"] <= 1 for m in ("sparse", "dense"))


def test_a_stream_round_starts_after_the_supervisors_writes_between_rounds() -> None:
    """Between rounds the supervisor writes the parameters on its own stream: a snapshot's
    sum reads them, the epoch's mean is swapped in and the last iterate back, a resume
    restores them (trainer.averaging, loop_state.restore_state). The learners' streams are not ordered
    after that stream by themselves (torch's streams do not wait for the default one), so a
    round must make them wait: a write still queued when the round began, behind a second of
    GPU work, landed after the round's updates and erased them (seen on an H200)."""
    device = torch.device("cuda")
    texts = [f"play song {i}" if i % 2 else f"weather today {i}" for i in range(32)]
    featurizer, bags = Featurizer.fit_transform(texts, FeaturizerConfig())
    targets = np.arange(32, dtype=np.int64) % 2
    model = TextClassifier(
        ModelConfig(rows=featurizer.rows, dim=8, classes=2), embedding_init=0.1, output_init=0.1
    )
    opt = OptimizerConfig(kind="sgd", lr=0.5)
    ps = ParameterServer.create(model_parameters(model), opt, 2, len(bags.ids), shared=False, device=device)
    task = partial(TextClassifierTask, unique_rows=False, multi_label=False, class_weights=None)
    pool = StreamPool(ps, task, ShardData.of(bags, targets, shared=False), 4, 7, device)
    bias = ps.params[2]
    # a first round: the learners' streams hold their memory, and the next round allocates
    # nothing (a cudaMalloc may synchronise the device, and hid the race in a first round)
    pool.run_round(1, [0, 0], [8, 8], lambda: False)

    torch.cuda._sleep(2_000_000_000)  # a second of work on the supervisor's stream, then its write
    bias.fill_(0.0)
    result = pool.run_round(1, [8, 8], [16, 16], lambda: False)

    assert result.positions == [16, 16] and ps.version() == 8
    assert not bool(bias.eq(0.0).all())  # the round's 4 updates came after the write
