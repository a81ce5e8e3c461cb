"""Classification metrics, JSON-safe: accuracy, macro-F1, per-class P/R/F1, confusion, ECE."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

MAX_CONFUSION_CLASSES = 100


def classification_report(true: Sequence[str], predicted: Sequence[str]) -> dict[str, object]:
    """Accuracy, macro-F1, n, per-class {precision, recall, f1, support} and the confusion matrix.

    Classes are the union of true and predicted labels, sorted; macro-F1 averages over
    them (as scikit-learn does). The confusion matrix has true labels as rows. It grows with
    the square of the classes (3,000 classes: 9 M cells, 100 MB of model.json), so beyond
    MAX_CONFUSION_CLASSES it keeps the classes most involved in errors (then the most
    frequent), in label order, and says ``"truncated": true``.
    Raises ValueError when the two sequences differ in length.
    """
    if len(true) != len(predicted):
        raise ValueError(f"{len(true)} true labels but {len(predicted)} predictions")
    labels = sorted(set(true) | set(predicted))
    index = {label: i for i, label in enumerate(labels)}
    matrix = np.zeros((len(labels), len(labels)), dtype=np.int64)
    for t, p in zip(true, predicted, strict=True):
        matrix[index[t], index[p]] += 1
    per_class: dict[str, dict[str, float | int]] = {}
    f1s: list[float] = []
    for i, label in enumerate(labels):
        hits, support, claimed = int(matrix[i, i]), int(matrix[i].sum()), int(matrix[:, i].sum())
        precision = hits / claimed if claimed else 0.0
        recall = hits / support if support else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_class[label] = {"precision": precision, "recall": recall, "f1": f1, "support": support}
        f1s.append(f1)
    n = len(true)
    return {
        "accuracy": float(np.trace(matrix)) / n if n else 0.0,
        "macro_f1": float(np.mean(f1s)) if f1s else 0.0,
        "n": n,
        "per_class": per_class,
        "confusion": _confusion(labels, matrix),
    }


def _confusion(labels: list[str], matrix: np.ndarray) -> dict[str, object]:
    if len(labels) <= MAX_CONFUSION_CLASSES:
        return {"labels": labels, "matrix": matrix.tolist()}
    errors = matrix.sum(axis=0) + matrix.sum(axis=1) - 2 * np.diag(matrix)
    volume = matrix.sum(axis=0) + matrix.sum(axis=1)
    keep = np.sort(np.lexsort((-volume, -errors))[:MAX_CONFUSION_CLASSES])
    return {
        "labels": [labels[i] for i in keep],
        "matrix": matrix[np.ix_(keep, keep)].tolist(),
        "truncated": True,
    }


def expected_calibration_error(confidence: Sequence[float], correct: Sequence[bool], bins: int = 15) -> float:
    """ECE of top-1 confidences over equal-width bins: sum of |accuracy - confidence| x bin share."""
    conf = np.asarray(confidence, dtype=np.float64)
    hit = np.asarray(correct, dtype=np.float64)
    if len(conf) == 0:
        return 0.0
    which = np.minimum((conf * bins).astype(np.int64), bins - 1)
    total = 0.0
    for b in range(bins):
        mask = which == b
        if mask.any():
            total += abs(hit[mask].mean() - conf[mask].mean()) * mask.sum() / len(conf)
    return float(total)
