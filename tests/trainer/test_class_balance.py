"""Class-balanced loss (HParams.class_balance): a class's examples together weigh as much as
any other class's, so a class with a handful of rows beside classes of hundreds is learned
(benchmarks/imbalance.py measures it on real data)."""

from __future__ import annotations

import csv
import dataclasses
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from synthetic import _FILLER, _VOCABULARY, synthetic_data
from test_accuracy_smoke import CHATBOT

from trainer.data import LabelledData
from trainer.engine import train
from trainer.features import Bags
from trainer.hparams import DEFAULT_HPARAMS
from trainer.inference import WEIGHTS_FILE, LoadedModel
from trainer.preparation import _class_weights
from trainer.step import Batch, TextClassifierTask


def test_each_class_weighs_rows_over_classes_in_all() -> None:
    weights = _class_weights(np.array([0] * 8 + [1] * 2 + [2] * 10), classes=3, balance=1.0, batch=16)

    assert weights is not None
    assert weights.tolist() == pytest.approx([20 / (3 * 8), 20 / (3 * 2), 20 / (3 * 10)])
    assert [8, 2, 10] @ weights.numpy() == pytest.approx(20)  # the mean weight per row stays 1


def test_balanced_data_weighs_every_row_alike() -> None:
    weights = _class_weights(np.array([0, 1, 2] * 5), classes=3, balance=1.0, batch=16)

    assert weights is not None
    assert weights.tolist() == pytest.approx([1.0, 1.0, 1.0])


def test_a_balance_between_0_and_1_is_a_power_of_the_full_weights() -> None:
    weights = _class_weights(np.array([0] * 9 + [1]), classes=2, balance=0.5, batch=16)

    assert weights is not None
    assert weights.tolist() == pytest.approx([(10 / 18) ** 0.5, 5**0.5])


def test_no_weight_is_above_the_batch_size_less_one_times_the_lightest() -> None:
    """One row of a class among 200 weighed 29 (three quarters of its batch's step); where its
    text was also another class's, the two tugged harder each epoch until the weights blew up."""
    weights = _class_weights(np.array([0] * 114 + [1] * 86 + [2]), classes=3, balance=1.0, batch=16)

    assert weights is not None
    lightest = 201 / (3 * 114)
    assert weights.tolist() == pytest.approx([lightest, 201 / (3 * 86), 15 * lightest])


@pytest.mark.slow
@pytest.mark.skipif(not (CHATBOT / "train.csv").exists(), reason=f"shared dataset absent: {CHATBOT}")
def test_one_row_classes_on_texts_of_big_classes_train(tmp_path: Path) -> None:
    """The chatbot rows and the same with "please " before each line (which splits five quoted
    rows into NLC rows of two classes: a text in a big class and a one-row class). The one-row
    classes weighed 29 and diverged every fold model and the final one (a trained set on
    2026-11-24, before class balancing); capped at 15, one of them took 14 of the 86 rows of
    its big class (0.863)."""
    lines = (CHATBOT / "train.csv").read_text(encoding="utf-8").splitlines()[1:]
    texts, labels = [], []
    for text, *classes in csv.reader(lines + ["please " + line for line in lines]):
        texts += [text] * len(classes)
        labels += classes

    result = train(LabelledData(texts, labels), workdir=tmp_path / "w", out_dir=tmp_path / "m")

    assert result.metrics["accuracy"] >= 0.9  # type: ignore[operator]
    LoadedModel.load(tmp_path / "m")


def test_no_balance_and_multi_label_targets_give_no_weights() -> None:
    assert _class_weights(np.array([0, 0, 1]), classes=2, balance=0.0, batch=16) is None
    assert (
        _class_weights(np.array([[1, 0], [1, 1]], dtype=np.uint8), classes=2, balance=1.0, batch=16) is None
    )


def _with_rare_class(common_rows: int, rare_rows: int, seed: int) -> LabelledData:
    """The synthetic classes with ``common_rows`` each, and ``rare_rows`` of a class whose
    texts share a word with ``booking`` and have one of four words of their own."""
    rng = random.Random(seed)
    texts, labels = [], []
    for _ in range(common_rows):
        for label, words in _VOCABULARY.items():
            texts.append(" ".join(rng.sample(words, 2) + rng.sample(_FILLER, 3)))
            labels.append(label)
    own = ["refund", "cancel", "money", "charge"]
    for _ in range(rare_rows):
        texts.append(
            " ".join([rng.choice(own), *rng.sample(_VOCABULARY["booking"], 1), *rng.sample(_FILLER, 3)])
        )
        labels.append("refund")
    return LabelledData(texts, labels)


def _train(tmp_path: Path, data: LabelledData, balance: float, **hparams_changes: Any) -> Path:
    hparams = dataclasses.replace(DEFAULT_HPARAMS, class_balance=balance, **hparams_changes)
    train(data, workdir=tmp_path / "w", out_dir=tmp_path / "m", hparams=hparams, learners=1)
    return tmp_path / "m"


def test_the_loss_weighs_each_example_by_its_class() -> None:
    task = TextClassifierTask(class_weights=torch.tensor([1.0, 3.0]))
    task.attach([torch.randn(6, 4), torch.randn(2, 4), torch.zeros(2)])
    bags = Bags(
        ids=np.array([0, 1, 2, 3, 4, 5]), weights=np.ones(6, dtype=np.float32), offsets=np.array([0, 3])
    )
    batch = Batch.of(bags, np.array([0, 1]))

    loss, _ = task.compute(None, batch)

    with torch.no_grad():
        first = F.cross_entropy(
            F.linear(task.table[[0, 1, 2]].sum(0, keepdim=True), *task.dense), torch.tensor([0])
        )
        second = F.cross_entropy(
            F.linear(task.table[[3, 4, 5]].sum(0, keepdim=True), *task.dense), torch.tensor([1])
        )
    assert loss == pytest.approx(float(first + 3 * second) / 4, rel=1e-5)


def test_on_balanced_data_the_balanced_loss_trains_the_same_model(tmp_path: Path) -> None:
    data = synthetic_data(40)
    # 120 rows are too few for a validation split, so each run would also train five fold
    # models by the same loss: six trainings where the final model's bytes are the comparison
    plain = _train(tmp_path / "plain", data, 0.0, cross_fit_folds=0)
    balanced = _train(tmp_path / "balanced", data, 1.0, cross_fit_folds=0)

    assert (plain / WEIGHTS_FILE).read_bytes() == (balanced / WEIGHTS_FILE).read_bytes()


def test_a_rare_class_is_found_more_often_when_balanced(tmp_path: Path) -> None:
    data, held_out = _with_rare_class(600, 4, seed=1), _with_rare_class(0, 100, seed=2)

    found = []
    for balance in (0.0, 1.0):
        model = LoadedModel.load(_train(tmp_path / str(balance), data, balance))
        found.append(sum(scores[0][0] == "refund" for scores in model.classify(held_out.texts)))

    assert found[1] > found[0], found  # 37 and 43 of 100 measured


def test_extreme_imbalance_trains_to_finite_weights(tmp_path: Path) -> None:
    data = _with_rare_class(400, 1, seed=3)

    probabilities = LoadedModel.load(_train(tmp_path, data, 1.0)).probabilities(data.texts)
    assert torch.isfinite(torch.from_numpy(probabilities)).all()
