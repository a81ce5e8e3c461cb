"""A trained model's evaluation on a tenant's own test rows, JSON-ready.

What ``POST /v1/classifiers/{id}/evaluate`` keeps with the version and shows as JSON and HTML,
and ``taas eval`` prints: accuracy, macro-F1, a per-class table, the confusion matrix, the
calibration of the top class's confidence, the pairs of classes confused most (with example
texts), the test labels the model never saw, and, for a model with out-of-scope detection,
how many in-scope rows it rejected and how many rows labelled ``OUT_OF_SCOPE_CLASS`` it caught.
:func:`evaluate_model` asks a loaded model for its answers a chunk at a time (an evaluation
job reports its progress between chunks); the reports themselves are pure functions of the
rows and the answers (:class:`Answers`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainer.data import OUT_OF_SCOPE_CLASS, LabelledData
from trainer.evaluate import classification_report, expected_calibration_error, multilabel_report
from trainer.inference import LoadedModel

REPORT_VERSION = 1
CALIBRATION_BINS = 10  # equal-width bins of the top class's confidence
PAIRS_SHOWN = 10  # the most confused (true, predicted) pairs a report lists
EXAMPLES_PER_PAIR = 3  # texts shown of each
EXAMPLE_CHARS = 200  # an example text is cut to this many characters
CHUNK = 256  # texts answered between two progress reports


@dataclass(frozen=True)
class Answers:
    """A single-label model's answer to each test text: its top class and that class's
    confidence, and, for a model with out-of-scope detection, the text's in-scope score and
    the rate below which a score is out of scope (None without)."""

    predicted: Sequence[str]
    confidence: Sequence[float]
    in_scope: Sequence[float] | None = None
    rate: float | None = None


def evaluate_model(
    model: LoadedModel,
    data: LabelledData,
    *,
    rate: float | None = None,
    progress: Callable[[int, int], None] = lambda done, total: None,
) -> dict[str, Any]:
    """The report of ``model`` on ``data`` (one row per text and label; a multi-label model is
    scored on the rows grouped by text). ``rate``: the out-of-scope rate in force for the
    classifier (None: the model's own). ``progress(done, total)`` is called after each chunk
    of texts answered."""
    if model.multi_label:
        assert model.threshold is not None
        examples = data.grouped()
        chosen: list[list[str]] = []
        for start in range(0, len(examples.texts), CHUNK):
            chosen += [
                model.labels_of(scores) for scores in model.classify(examples.texts[start : start + CHUNK])
            ]
            progress(len(chosen), len(examples.texts))
        return multi_label_report(examples.texts, examples.label_sets, chosen, model.classes, model.threshold)
    predicted: list[str] = []
    confidence: list[float] = []
    in_scope: list[float] | None = [] if model.in_scope is not None else None
    for start in range(0, len(data.texts), CHUNK):
        chunk = data.texts[start : start + CHUNK]
        embeddings = model.embed(chunk)
        probabilities = model.probabilities(chunk, embeddings)
        for (top, conf), *_ in model.rank(probabilities, top=1):
            predicted.append(top)
            confidence.append(conf)
        scores = model.in_scope_scores(probabilities, embeddings)
        if in_scope is not None and scores is not None:
            in_scope += scores
        progress(len(predicted), len(data.texts))
    if rate is None and model.in_scope is not None:
        rate = model.in_scope.rate
    answers = Answers(predicted, confidence, in_scope, rate if in_scope is not None else None)
    return single_label_report(data.texts, data.labels, answers, model.classes)


def single_label_report(
    texts: Sequence[str], labels: Sequence[str], answers: Answers, classes: Collection[str]
) -> dict[str, Any]:
    """The report of a single-label model (trained on ``classes``) on rows ``texts[i], labels[i]``.

    Rows labelled OUT_OF_SCOPE_CLASS have no right class: they count in ``rows`` and in the
    out-of-scope figures only; every other figure is over the in-scope rows (``n``).
    """
    if not len(texts) == len(labels) == len(answers.predicted) == len(answers.confidence):
        raise ValueError("texts, labels and answers differ in length")
    scored = [i for i, label in enumerate(labels) if label != OUT_OF_SCOPE_CLASS]
    true = [labels[i] for i in scored]
    predicted = [answers.predicted[i] for i in scored]
    confidence = np.asarray([answers.confidence[i] for i in scored], dtype=np.float64)
    correct = np.asarray([t == p for t, p in zip(true, predicted, strict=True)], dtype=bool)
    metrics: dict[str, Any] = classification_report(true, predicted)
    return {
        "version": REPORT_VERSION,
        "multi_label": False,
        "rows": len(texts),
        "n": metrics["n"],
        "accuracy": metrics["accuracy"],
        "macro_f1": metrics["macro_f1"],
        "per_class": _per_class(metrics["per_class"], Counter(predicted)),
        "confusion": metrics["confusion"],
        "calibration": _calibration(confidence, correct),
        "confused_pairs": _confused_pairs(texts, labels, answers, scored),
        "unknown_classes": _unknown_classes(true, classes),
        "out_of_scope": _out_of_scope(labels, answers),
    }


def multi_label_report(
    texts: Sequence[str],
    label_sets: Sequence[Collection[str]],
    predicted: Sequence[Collection[str]],
    classes: Collection[str],
    threshold: float,
) -> dict[str, Any]:
    """The report of a multi-label model on distinct ``texts`` with their label sets: the
    pooled (micro) and per-class (macro) figures, subset accuracy and the per-class table at
    the model's ``threshold``."""
    metrics = multilabel_report(label_sets, predicted)
    per_class = metrics.pop("per_class")
    assert isinstance(per_class, dict)
    claimed = Counter(label for chosen in predicted for label in chosen)
    return {
        "version": REPORT_VERSION,
        "multi_label": True,
        "rows": len(texts),
        **metrics,
        "threshold": threshold,
        "per_class": _per_class(per_class, claimed),
        "unknown_classes": _unknown_classes([label for labels in label_sets for label in labels], classes),
    }


def _per_class(per_class: dict[str, Any], claimed: Counter[str]) -> list[dict[str, Any]]:
    """One row per class, in label order: precision, recall, F1, its test rows (``support``)
    and the rows the model gave it (``predicted``)."""
    return [
        {"class_name": name, **figures, "predicted": claimed.get(name, 0)}
        for name, figures in sorted(per_class.items())
    ]


def _calibration(confidence: np.ndarray, correct: np.ndarray) -> dict[str, Any]:
    """How far the top class's confidence is from the accuracy it stands for: the expected
    calibration error and, per non-empty bin of confidence, its rows, mean confidence and
    accuracy (a calibrated model's two agree)."""
    bins = []
    which = np.minimum((confidence * CALIBRATION_BINS).astype(np.int64), CALIBRATION_BINS - 1)
    for b in range(CALIBRATION_BINS):
        mask = which == b
        if mask.any():
            bins.append(
                {
                    "lower": b / CALIBRATION_BINS,
                    "upper": (b + 1) / CALIBRATION_BINS,
                    "rows": int(mask.sum()),
                    "confidence": float(confidence[mask].mean()),
                    "accuracy": float(correct[mask].mean()),
                }
            )
    return {
        "ece": expected_calibration_error(confidence.tolist(), correct.tolist(), bins=CALIBRATION_BINS),
        "bins": bins,
    }


def _confused_pairs(
    texts: Sequence[str], labels: Sequence[str], answers: Answers, scored: Sequence[int]
) -> list[dict[str, Any]]:
    """The (true, predicted) pairs of the most wrong rows, most first (ties in name order),
    each with its first few texts and the confidence the model gave the wrong class."""
    wrong: dict[tuple[str, str], list[int]] = {}
    for i in scored:
        if answers.predicted[i] != labels[i]:
            wrong.setdefault((labels[i], answers.predicted[i]), []).append(i)
    ranked = sorted(wrong.items(), key=lambda item: (-len(item[1]), item[0]))[:PAIRS_SHOWN]
    return [
        {
            "true_class": true,
            "predicted_class": predicted,
            "rows": len(rows),
            "examples": [
                {"text": texts[i][:EXAMPLE_CHARS], "confidence": float(answers.confidence[i])}
                for i in rows[:EXAMPLES_PER_PAIR]
            ],
        }
        for (true, predicted), rows in ranked
    ]


def _unknown_classes(true: Sequence[str], classes: Collection[str]) -> list[dict[str, Any]]:
    """The test labels the model was not trained on, with their rows: no answer can be right."""
    known = set(classes)
    counts = Counter(label for label in true if label not in known)
    return [{"class_name": name, "rows": rows} for name, rows in sorted(counts.items())]


def _out_of_scope(labels: Sequence[str], answers: Answers) -> dict[str, Any] | None:
    """For a model with out-of-scope detection: the rate, the in-scope rows it rejected, and of
    the rows labelled OUT_OF_SCOPE_CLASS those it caught (None without detection)."""
    if answers.in_scope is None or answers.rate is None:
        return None
    rate = answers.rate
    rejected = [score < rate for score in answers.in_scope]
    outside = [label == OUT_OF_SCOPE_CLASS for label in labels]
    in_scope_rows = outside.count(False)
    out_of_scope_rows = outside.count(True)
    false_rejections = sum(r and not o for r, o in zip(rejected, outside, strict=True))
    caught = sum(r and o for r, o in zip(rejected, outside, strict=True))
    return {
        "rate": rate,
        "in_scope_rows": in_scope_rows,
        "rejected_in_scope": false_rejections,
        "false_rejection_rate": false_rejections / in_scope_rows if in_scope_rows else None,
        "out_of_scope_rows": out_of_scope_rows,
        "caught": caught,
        "recall": caught / out_of_scope_rows if out_of_scope_rows else None,
    }
