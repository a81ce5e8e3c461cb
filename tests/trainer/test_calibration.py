from __future__ import annotations

from pathlib import Path

import numpy as np

from trainer import LabelledData, LoadedModel, train
from trainer.calibration import calibrate, fit_temperature, nll, softmax, top1_ece
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
