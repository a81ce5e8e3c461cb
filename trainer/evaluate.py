"""Classification metrics, JSON-safe: accuracy, macro-F1, per-class P/R/F1, confusion, ECE;
and for multi-label models the decision rule, its threshold and their metrics."""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

MAX_CONFUSION_CLASSES = 100
DEFAULT_THRESHOLD = 0.5  # a multi-label model's threshold when no held-out scores exist
THRESHOLDS = tuple(i / 20 for i in range(1, 20))  # the candidates: 0.05, 0.10, ..., 0.95


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
        support = int(matrix[i].sum())
        precision, recall, f1 = _precision_recall_f1(int(matrix[i, i]), support, int(matrix[:, i].sum()))
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


def _precision_recall_f1(hits: int, support: int, claimed: int) -> tuple[float, float, float]:
    """Precision, recall and F1 from counts; each 0.0 where its denominator is 0 (as scikit-learn)."""
    precision = hits / claimed if claimed else 0.0
    recall = hits / support if support else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


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


def decide(probabilities: np.ndarray, threshold: float) -> np.ndarray:
    """The multi-label decision (texts x classes, bool) that evaluation and inference share.

    A class is chosen when its probability is at or above ``threshold``, and every text gets
    at least its most probable class: every text of a taas training set has a label (the CSV
    has no label-less rows), and on the Reuters-21578 validation split this rule gave a
    higher micro-F1 than leaving texts with no label (docs/model.md, "Multi-label").
    """
    probabilities = np.asarray(probabilities)
    chosen = probabilities >= threshold
    chosen[np.arange(len(probabilities)), probabilities.argmax(axis=1)] = True
    return chosen


def micro_f1(truth: np.ndarray, chosen: np.ndarray) -> float:
    """Micro-averaged F1 of two bool matrices (texts x classes): 2 TP / (2 TP + FP + FN)."""
    hits, total = int(np.logical_and(truth, chosen).sum()), int(truth.sum() + chosen.sum())
    return 2 * hits / total if total else 0.0


def choose_threshold(probabilities: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    """(threshold, micro-F1): the candidate of THRESHOLDS whose decisions score the highest
    micro-F1 against ``truth`` (bool, texts x classes) on held-out probabilities.

    One global threshold on a coarse grid, not one per class or every distinct probability:
    a validation split holds a handful of examples of most classes, and a finer choice would
    fit their noise. Ties go to the candidate nearest DEFAULT_THRESHOLD.
    """
    scored = [(micro_f1(truth, decide(probabilities, t)), -abs(t - DEFAULT_THRESHOLD), t) for t in THRESHOLDS]
    best_f1, _, best = max(scored)
    return best, best_f1


def decide_on_other_half(probabilities: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """Held-out decisions for reporting: the even rows decided at the threshold that
    choose_threshold picks on the odd rows, and the odd rows at the one it picks on the even.

    Metrics measured at a threshold chosen on the same scores flatter the model by that
    choice; these measure what choosing a threshold on held-out scores does for texts it was
    not chosen on. Each choice sees half the rows, so if anything they err low. With one row,
    that row is decided at DEFAULT_THRESHOLD.
    """
    chosen = np.zeros(np.shape(probabilities), dtype=bool)
    halves = np.arange(len(probabilities)) % 2
    for half in (0, 1):
        rows, others = halves == half, halves != half
        threshold = (
            choose_threshold(probabilities[others], truth[others])[0] if others.any() else DEFAULT_THRESHOLD
        )
        chosen[rows] = decide(probabilities[rows], threshold)
    return chosen


def multilabel_report(
    true: Sequence[Collection[str]], predicted: Sequence[Collection[str]]
) -> dict[str, object]:
    """Multi-label metrics of label sets, as AWS Comprehend reports them and more.

    micro_f1 / micro_precision / micro_recall (pooled over every (text, class) decision),
    macro_f1 / macro_precision / macro_recall (means over classes), hamming_loss (the share
    of wrong (text, class) decisions), subset_accuracy (texts whose whole set is right), n,
    and per_class {precision, recall, f1, support}. Classes are the union of true and
    predicted labels, sorted, as in classification_report. Raises ValueError when the two
    sequences differ in length.
    """
    if len(true) != len(predicted):
        raise ValueError(f"{len(true)} true label sets but {len(predicted)} predictions")
    labels = sorted({label for labels in (*true, *predicted) for label in labels})
    truth, chosen = _indicator(true, labels), _indicator(predicted, labels)
    hits, support, claimed = (truth & chosen).sum(axis=0), truth.sum(axis=0), chosen.sum(axis=0)
    per_class: dict[str, dict[str, float | int]] = {}
    for i, label in enumerate(labels):
        precision, recall, f1 = _precision_recall_f1(int(hits[i]), int(support[i]), int(claimed[i]))
        per_class[label] = {"precision": precision, "recall": recall, "f1": f1, "support": int(support[i])}
    micro = _precision_recall_f1(int(hits.sum()), int(support.sum()), int(claimed.sum()))
    macro = [
        float(np.mean([c[key] for c in per_class.values()])) if labels else 0.0
        for key in ("precision", "recall", "f1")
    ]
    return {
        "micro_f1": micro[2],
        "micro_precision": micro[0],
        "micro_recall": micro[1],
        "macro_f1": macro[2],
        "macro_precision": macro[0],
        "macro_recall": macro[1],
        "hamming_loss": float((truth != chosen).mean()) if truth.size else 0.0,
        "subset_accuracy": float((truth == chosen).all(axis=1).mean()) if len(true) else 0.0,
        "n": len(true),
        "per_class": per_class,
    }


def _indicator(label_sets: Sequence[Collection[str]], labels: list[str]) -> np.ndarray:
    """Bool matrix (sets x labels) marking each set's labels."""
    column = {label: i for i, label in enumerate(labels)}
    matrix = np.zeros((len(label_sets), len(labels)), dtype=bool)
    for row, members in enumerate(label_sets):
        matrix[row, [column[label] for label in members]] = True
    return matrix
