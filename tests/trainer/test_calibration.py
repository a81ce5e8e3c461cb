from __future__ import annotations

import numpy as np

from trainer.calibration import calibrate, fit_temperature, nll, softmax, top1_ece


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
