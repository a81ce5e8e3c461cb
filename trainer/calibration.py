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


def nll(logits: np.ndarray, targets: np.ndarray, temperature: float) -> float:
    """Mean negative log-likelihood of ``targets`` under softmax(logits / temperature)."""
    z = np.asarray(logits, dtype=np.float64) / temperature
    z = z - z.max(axis=1, keepdims=True)
    log_norm = np.log(np.exp(z).sum(axis=1))
    return float(np.mean(log_norm - z[np.arange(len(targets)), targets]))


def fit_temperature(logits: np.ndarray, targets: np.ndarray) -> float:
    """The T in [MIN_TEMPERATURE, MAX_TEMPERATURE] minimising the held-out NLL; 1.0 without
    data, or when no T fits it better than 1.0 does.

    The last is the case of held-out scores that carry no information, e.g. uniform ones where
    no fold model could be trained: the NLL is then flat, the search ran to its lower end, and
    T = 0.05 made the final model, trained on every row, answer with confidences of 0.999999.

    The NLL is convex in 1 / T (a log-sum-exp of functions linear in it, minus a linear
    term), so a golden-section search on log T finds the minimum without gradients.
    A class the model never saw has a -inf logit (probability 0 at any T): a row whose own
    class is such a one is left out, the other rows are fitted as they are (leaving out every
    row with any -inf logit left nothing to fit where cross-fitting folds lacked a rare class).
    """
    logits, targets = np.asarray(logits, dtype=np.float64), np.asarray(targets)
    keep = np.isfinite(logits[np.arange(len(targets)), targets])
    logits, targets = logits[keep], targets[keep]
    if len(targets) == 0:
        return 1.0
    low, high = math.log(MIN_TEMPERATURE), math.log(MAX_TEMPERATURE)
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
    return best if nll(logits, targets, best) < nll(logits, targets, 1.0) else 1.0


def calibrate(logits: np.ndarray, targets: np.ndarray) -> float:
    """The temperature the saved model gets: the NLL-optimal one, unless it raises the ECE.

    NLL is the smooth criterion that fixes T, ECE the figure a tenant is told. On a few
    dozen held-out examples the two can disagree (the NLL is then dominated by one or two
    confident errors), and a T that makes the reported ECE worse is not kept: 1.0 instead.
    """
    temperature = fit_temperature(logits, targets)
    return temperature if top1_ece(logits, targets, temperature) <= top1_ece(logits, targets) else 1.0


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
