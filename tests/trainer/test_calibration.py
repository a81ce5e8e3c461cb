from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from synthetic import synthetic_data

from trainer import LabelledData, LoadedModel, train
from trainer.calibration import (
    MIN_TEMPERATURE,
    calibrate,
    fit_temperature,
    lowest_temperature,
    nll,
    softmax,
    top1_ece,
)
from trainer.hparams import HParams


def _overconfident(
    rows: int = 4000, classes: int = 5, true_temperature: float = 3.0
) -> tuple[np.ndarray, ...]:
    """Logits whose labels were drawn from softmax(logits / true_temperature)."""
    rng = np.random.default_rng(0)
    logits = rng.normal(0.0, 4.0, size=(rows, classes))
    calibrated = softmax(logits, true_temperature)
    targets = np.array([rng.choice(classes, p=p) for p in calibrated])
    return logits, targets


def test_the_fitted_temperature_recovers_the_one_the_labels_were_drawn_with() -> None:
    logits, targets = _overconfident()
    temperature = fit_temperature(logits, targets)
    assert abs(temperature - 3.0) < 0.3
    assert nll(logits, targets, temperature) < nll(logits, targets, 1.0)
    assert top1_ece(logits, targets, temperature) < 0.03 < top1_ece(logits, targets)


def test_calibration_keeps_predictions_and_ignores_rows_with_unseen_classes() -> None:
    logits, targets = _overconfident(rows=500)
    with_unseen = np.vstack([logits, [[-np.inf, 0.0, 1.0, 2.0, 3.0]]])
    temperature = calibrate(with_unseen, np.append(targets, 0))
    assert np.isfinite(temperature) and temperature > 1.0
    assert np.array_equal(softmax(logits, temperature).argmax(axis=1), logits.argmax(axis=1))


def test_held_out_scores_without_information_leave_the_temperature_at_one() -> None:
    """Uniform scores (no fold model could be trained) or identical ones: every T fits alike."""
    targets = np.array([0, 1, 2, 1, 0])
    assert fit_temperature(np.zeros((5, 3)), targets) == 1.0
    assert calibrate(np.zeros((5, 3)), targets) == 1.0


def test_one_example_per_class_trains_a_model_of_temperature_one(
    tmp_path: Path, quick_hparams: HParams
) -> None:
    """Each cross-fitting fold lacks a class, so every held-out score is uniform: no T is
    better than another, and the final model must not be sharpened by T = 0.05."""
    data = LabelledData(["hello there", "goodbye now"], ["greet", "bye"])
    result = train(data, workdir=tmp_path / "w", out_dir=tmp_path / "m", hparams=quick_hparams)
    assert result.metrics["temperature"] == 1.0
    top = LoadedModel.load(tmp_path / "m").classify(["something else entirely"])[0][0][1]
    assert top < 0.99


def test_without_held_out_rows_the_temperature_is_one() -> None:
    assert fit_temperature(np.zeros((0, 3)), np.zeros(0, dtype=np.int64)) == 1.0
    assert softmax(np.array([[-np.inf, 0.0]])).tolist() == [[0.0, 1.0]]


def test_a_class_a_fold_model_never_saw_leaves_out_only_its_own_rows() -> None:
    # cross-fitting: the fold model of these rows never saw class 4, so its logit is -inf for
    # every row; rows of classes 0-3 still carry the evidence for the temperature
    logits, targets = _overconfident(rows=2000)
    seen = targets != 4
    logits, targets = logits[seen], targets[seen]
    logits[:, 4] = -np.inf

    temperature = fit_temperature(logits, targets)

    assert abs(temperature - 3.0) < 0.4


def _all_right(rows: int = 120, classes: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """Logits whose top class is every row's target, by a margin of about 3."""
    rng = np.random.default_rng(1)
    targets = rng.integers(0, classes, size=rows)
    logits = rng.normal(0.0, 0.5, size=(rows, classes))
    logits[np.arange(rows), targets] += 3.0
    return logits, targets


def test_held_out_rows_all_right_bound_the_confidence_by_laplaces_rule() -> None:
    """The NLL of rows that are all right falls as T falls: unbounded, the search ran to
    T = 0.05 and the model answered 1.0 for anything. 120 right of 120 support 121 / 122."""
    logits, targets = _all_right()
    assert (logits.argmax(axis=1) == targets).all()

    temperature = calibrate(logits, targets)

    assert lowest_temperature(logits, targets) == temperature > MIN_TEMPERATURE
    mean_confidence = softmax(logits, temperature).max(axis=1).mean()
    assert mean_confidence == pytest.approx(121 / 122, abs=1e-6)
    assert softmax(logits, 0.9 * temperature).max(axis=1).mean() > 121 / 122


def test_with_a_row_wrong_the_nll_alone_fixes_the_temperature() -> None:
    logits, targets = _overconfident()
    assert lowest_temperature(logits, targets) == MIN_TEMPERATURE

    logits, targets = _all_right()
    logits[0, (targets[0] + 1) % 4] += 10.0  # one confident error
    assert lowest_temperature(logits, targets) == MIN_TEMPERATURE
    assert fit_temperature(logits, targets) > MIN_TEMPERATURE


def test_a_model_right_on_every_validation_row_is_not_sharpened_to_certainty(
    tmp_path: Path, quick_hparams: HParams
) -> None:
    """Before the bound: T = 0.05, and filler words alone were 'music' at 0.99999."""
    result = train(synthetic_data(30), workdir=tmp_path / "w", out_dir=tmp_path / "m", hparams=quick_hparams)
    assert result.metrics["accuracy"] == 1.0 and result.metrics["n"] == 18

    assert result.metrics["temperature"] > 1.0
    assert LoadedModel.load(tmp_path / "m").classify(["the a for me"])[0][0][1] < 0.9
