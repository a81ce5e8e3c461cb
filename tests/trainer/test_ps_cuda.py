"""The CUDA path: learners as streams of one process sharing the GPU. Skipped without CUDA."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trainer.data import LabelledData
from trainer.engine import train
from trainer.hparams import HParams
from trainer.inference import LoadedModel

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
    assert result.metrics["accuracy"] >= 0.9  # type: ignore[operator]
    assert LoadedModel.load(tmp_path / "m").classify(["play a jazz song"])[0][0][0] == "music"
