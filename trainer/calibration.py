"""Temperature scaling (Guo et al., ICML 2017): one scalar that makes confidences honest.

A classifier trained to low cross-entropy on small, separable data puts nearly all of its
mass on the top class (runner-ups of 1e-9), so a tenant cannot threshold on its
confidences. Dividing the logits by a temperature T fitted on held-out examples keeps every
prediction (the arg-max does not move) and makes the confidences match the accuracy. The
trainer folds 1 / T into the output layer when it saves the model, so inference is unchanged.
"""

from __future__ import annotations

import math

import numpy as np

from trainer.evaluate import expected_calibration_error

MIN_TEMPERATURE = 0.05
MAX_TEMPERATURE = 20.0
_STEPS = 80  # golden-section steps: the bracket shrinks to 1e-16 of its width
_BISECTIONS = 40  # lowest_temperature's: log T to 1e-12


def nll(logits: np.ndarray, targets: np.ndarray, temperature: float) -> float:
    """Mean negative log-likelihood of ``targets`` under softmax(logits / temperature)."""
    z = np.asarray(logits, dtype=np.float64) / temperature
    z = z - z.max(axis=1, keepdims=True)
    log_norm = np.log(np.exp(z).sum(axis=1))
    return float(np.mean(log_norm - z[np.arange(len(targets)), targets]))


def fit_temperature(logits: np.ndarray, targets: np.ndarray) -> float:
    """The T in [lowest_temperature, MAX_TEMPERATURE] minimising the held-out NLL; 1.0 without
    data, or when no T fits it better than 1.0 does (and 1.0 is not below the lowest T).

    The last is the case of held-out scores that carry no information, e.g. uniform ones where
    no fold model could be trained: the NLL is then flat, the search ran to its lower end, and
    T = 0.05 made the final model, trained on every row, answer with confidences of 0.999999.

    The NLL is convex in 1 / T (a log-sum-exp of functions linear in it, minus a linear
    term), so a golden-section search on log T finds the minimum without gradients.
    A class the model never saw has a -inf logit (probability 0 at any T): a row whose own
    class is such a one is left out, the other rows are fitted as they are (leaving out every
    row with any -inf logit left nothing to fit where cross-fitting folds lacked a rare class).
    """
    return _fit(logits, targets)[0]


def _fit(logits: np.ndarray, targets: np.ndarray) -> tuple[float, float]:
    """fit_temperature's T, and the one to fall back to: 1.0, or the lowest T if above."""
    logits, targets = np.asarray(logits, dtype=np.float64), np.asarray(targets)
    keep = np.isfinite(logits[np.arange(len(targets)), targets])
    logits, targets = logits[keep], targets[keep]
    if len(targets) == 0:
        return 1.0, 1.0
    lowest = lowest_temperature(logits, targets)
    fallback = max(1.0, lowest)
    low, high = math.log(lowest), math.log(MAX_TEMPERATURE)
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = high - ratio * (high - low), low + ratio * (high - low)
    fa, fb = nll(logits, targets, math.exp(a)), nll(logits, targets, math.exp(b))
    for _ in range(_STEPS):
        if fa <= fb:
            high, b, fb = b, a, fa
            a = high - ratio * (high - low)
            fa = nll(logits, targets, math.exp(a))
        else:
            low, a, fa = a, b, fb
            b = low + ratio * (high - low)
            fb = nll(logits, targets, math.exp(b))
    best = math.exp((low + high) / 2.0)
    return (best if nll(logits, targets, best) < nll(logits, targets, fallback) else fallback), fallback


def lowest_temperature(logits: np.ndarray, targets: np.ndarray) -> float:
    """MIN_TEMPERATURE, unless every held-out row is right: then the lowest T at which their
    mean top-1 confidence is at most (rows + 1) / (rows + 2), Laplace's rule of succession.

    With one row wrong the NLL has a minimum (that row's loss grows as T falls); with none
    it falls as T falls, all the way to MIN_TEMPERATURE: 120 of 120 validation rows right
    gave T = 0.05 and a model answering 1.0 for anything, wrong answers on new data
    included. Those rows support a confidence of 121 / 122 and no more. The mean top-1
    confidence falls as T rises, so a bisection on log T finds the bound.
    """
    if not (np.asarray(logits).argmax(axis=1) == np.asarray(targets)).all():
        return MIN_TEMPERATURE
    ceiling = (len(targets) + 1) / (len(targets) + 2)

    def confidence(log_t: float) -> float:
        return float(softmax(logits, math.exp(log_t)).max(axis=1).mean())

    low, high = math.log(MIN_TEMPERATURE), math.log(MAX_TEMPERATURE)
    if confidence(low) <= ceiling:
        return MIN_TEMPERATURE
    for _ in range(_BISECTIONS):
        middle = (low + high) / 2.0
        low, high = (low, middle) if confidence(middle) <= ceiling else (middle, high)
    return math.exp(high)


def calibrate(logits: np.ndarray, targets: np.ndarray) -> float:
    """The temperature the saved model gets: the NLL-optimal one, unless it raises the ECE.

    NLL is the smooth criterion that fixes T, ECE the figure a tenant is told. On a few
    dozen held-out examples the two can disagree (the NLL is then dominated by one or two
    confident errors), and a T that makes the reported ECE worse is not kept: 1.0 instead
    (or the lowest temperature, when 1.0 is below it).
    """
    temperature, fallback = _fit(logits, targets)
    return (
        temperature
        if top1_ece(logits, targets, temperature) <= top1_ece(logits, targets, fallback)
        else fallback
    )


def top1_ece(logits: np.ndarray, targets: np.ndarray, temperature: float = 1.0) -> float:
    """ECE (trainer.evaluate) of the top-1 confidences of softmax(logits / temperature)."""
    probabilities = softmax(logits, temperature)
    predicted = probabilities.argmax(axis=1)
    confidence = probabilities[np.arange(len(predicted)), predicted]
    return expected_calibration_error(confidence, predicted == np.asarray(targets))


def softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Row-wise softmax of logits / temperature, float64; -inf logits get probability 0."""
    z = np.asarray(logits, dtype=np.float64) / temperature
    z = np.exp(z - z.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)
