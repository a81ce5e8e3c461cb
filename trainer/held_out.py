"""A model's scores on rows it did not train on, and what the finished model's are read into.

Each epoch's validation score (``validate``); at the end, the logits of the validation split,
or for data too small to hold one out, cross-fitting's out-of-fold logits (``start_folds``,
``cross_fit_logits``); and from those the metrics, the softmax temperature, the multi-label
decision threshold and the single-label out-of-scope scoring (``in_scope_scoring``) saved
with the model.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from trainer.calibration import calibrate, top1_ece
from trainer.data import OUT_OF_SCOPE_CLASS, LabelledData, stratified_folds
from trainer.evaluate import (
    DEFAULT_THRESHOLD,
    choose_threshold,
    classification_report,
    decide,
    decide_on_other_half,
    multilabel_report,
)
from trainer.features import Bags
from trainer.folds import FoldRuns
from trainer.hparams import HParams
from trainer.in_scope import InScope, fit_in_scope
from trainer.inference import LoadedModel, bag_tensors
from trainer.learner_count import default_learners
from trainer.model import TextClassifier
from trainer.preparation import Prepared, TrainingData, example_targets
from trainer.sentence_features import SentenceVectors
from trainer.step import multi_label_loss


def _logits(model: TextClassifier, bags: Bags) -> torch.Tensor:
    device = model.output.weight.device
    with torch.no_grad():
        return model(*(t.to(device) for t in bag_tensors(bags))).cpu()


def validate(
    model: TextClassifier, bags: Bags, targets: np.ndarray, multi_label: bool
) -> tuple[float, float]:
    """(score, loss) of the validation split: accuracy and cross-entropy, or for a multi-label
    model micro-F1 at the threshold best for it now, and the loss it trains on."""
    logits = _logits(model, bags)
    if multi_label:
        loss = float(multi_label_loss(logits, torch.from_numpy(targets)))
        return choose_threshold(torch.sigmoid(logits).numpy(), targets.astype(bool))[1], loss
    loss = float(F.cross_entropy(logits, torch.from_numpy(targets)))
    accuracy = float((logits.argmax(dim=1).numpy() == targets).mean())
    return accuracy, loss


def held_out_logits(model: TextClassifier, prepared: Prepared) -> tuple[np.ndarray, np.ndarray, str]:
    """Logits and targets of the validation split, or of the training data when there is none."""
    if prepared.validation_bags is not None and prepared.validation_targets is not None:
        bags, targets, evaluated_on = prepared.validation_bags, prepared.validation_targets, "validation"
    else:
        bags, targets, evaluated_on = prepared.train_bags, prepared.train_targets, "training"
    return _logits(model, bags).numpy(), targets, evaluated_on


FoldLogits = tuple[np.ndarray, np.ndarray | None, np.ndarray | None]


def start_folds(
    data: TrainingData,
    labels: list[str],
    hparams: HParams,
    vectors: SentenceVectors | None,
    fit: Callable[..., object],
) -> FoldRuns[FoldLogits]:
    """Start training the fold models of cross_fit_logits, one process per core at most (trainer.folds).

    Each of ``cross_fit_folds`` stratified folds is scored by a model trained exactly like
    the final one (same hparams, same fixed update budget) on the other folds, with K = 1
    and without checkpoints: about five times the final model's training work, which on
    data this small is seconds (the budget is fixed, so the time is bounded too), spread
    over the node's cores. ``fit`` trains each of them: the engine's one training session
    (trainer.engine's ``_train``), passed in because the engine imports this module; a
    module-level function, so that it reaches the fold processes by name.
    """
    folds = stratified_folds(data.strata, hparams.cross_fit_folds, hparams.seed)
    run = partial(_fold_logits, fit, data, folds, labels, _without_checkpoints(hparams), vectors)
    return FoldRuns(run, hparams.cross_fit_folds, default_learners())


def start_held_out(
    data: TrainingData,
    held: np.ndarray,
    labels: list[str],
    hparams: HParams,
    vectors: SentenceVectors | None,
    fit: Callable[..., object],
) -> FoldRuns[FoldLogits]:
    """Start training the held-out model of a model that trains on every row
    (preparation.refit_split): one model trained like it without the rows ``held``, in a
    process of its own beside it (as start_folds' fold models), whose logits on those rows
    give the metrics and the temperature (held_out_fold_logits)."""
    folds = np.ones(len(data), dtype=np.int64)
    folds[held] = 0
    run = partial(_fold_logits, fit, data, folds, labels, _without_checkpoints(hparams), vectors)
    return FoldRuns(run, 1, 1)


def _without_checkpoints(hparams: HParams) -> HParams:
    """``hparams`` for a model that writes no checkpoint (a fold or held-out model: a stop
    trains it again from the start)."""
    return replace(hparams, checkpoint_every_updates=1 << 62, checkpoint_every_seconds=math.inf)


def _fold_logits(
    fit: Callable[..., object],
    data: TrainingData,
    folds: np.ndarray,
    labels: list[str],
    hparams: HParams,
    vectors: SentenceVectors | None,
    fold: int,
) -> FoldLogits:
    """(held-out rows, their logits' columns, logits) of the model trained without ``fold``;
    no columns or logits when no row is held out.

    When the other folds hold one class, no model can be trained on them, and what they teach
    is that class alone: it is every held-out row's prediction, a sure one (logit 50, where a
    sigmoid is 1 to float64's precision and a softmax over it and the others' -inf is 1).
    The held rows were scored uniform before, and an argmax of equal scores took the first
    class by name: a rare class named 'a' was reported found, one named 'z' missed; and in
    multi-label mode sigmoid(0) = 0.5 put every class on every such row."""
    held = np.flatnonzero(folds == fold)
    fold_data = data.subset(np.flatnonzero(folds != fold))
    if len(held) == 0:
        return held, None, None
    if len(fold_data.classes) < 2:
        return held, np.array([labels.index(fold_data.classes[0])]), np.full((len(held), 1), 50.0)
    with tempfile.TemporaryDirectory(prefix="taas-fold-") as tmp:
        fit(
            fold_data,
            workdir=Path(tmp) / "work",
            out_dir=Path(tmp) / "model",
            hparams=hparams,
            learners=1,
            on_progress=lambda p: None,
            should_stop=lambda: False,
            device=torch.device("cpu"),
            cross_fit=False,
            vectors=vectors,
        )
        fold_model = LoadedModel.load(Path(tmp) / "model", check_encoder_weights=False)
    held_texts = [data.texts[i] for i in held]
    held_bags = fold_model.bags(held_texts, None if vectors is None else vectors.of(held_texts))
    with torch.no_grad():
        fold_logits = fold_model.model(*bag_tensors(held_bags)).numpy().astype(np.float64)
    column = {label: i for i, label in enumerate(labels)}
    return held, np.array([column[label] for label in fold_model.labels]), fold_logits


def cross_fit_logits(
    data: TrainingData, labels: list[str], folds: FoldRuns[FoldLogits], should_stop: Callable[[], bool]
) -> tuple[np.ndarray, np.ndarray, str]:
    """Out-of-fold logits of every example, for data too small to hold a validation split out,
    from the fold models that start_folds started.

    The fold models are a little weaker than the final one (80 % of the data), so the metrics
    err on the low side and the temperature on the cautious one. A class a fold model never
    saw gets -inf logits: its held-out example counts as an error and is left out of the
    temperature fit. A stop request raises TrainingStopped (the caller points it at the
    final model's checkpoint, from where the folds run again).
    """
    logits = np.full((len(data), len(labels)), -np.inf)
    for held, columns, fold_logits in folds.results(should_stop):
        if columns is not None:
            logits[np.ix_(held, columns)] = fold_logits
    return logits, example_targets(data, labels), "cross-validation"


def held_out_fold_logits(
    data: TrainingData, labels: list[str], run: FoldRuns[FoldLogits], should_stop: Callable[[], bool]
) -> tuple[np.ndarray, np.ndarray, str]:
    """The logits and targets of the rows start_held_out's model left out. A class that model
    never saw gets -inf logits (as in cross_fit_logits). A stop request raises TrainingStopped."""
    ((held, columns, fold_logits),) = run.results(should_stop)
    logits = np.full((len(held), len(labels)), -np.inf)
    if columns is not None:
        logits[:, columns] = fold_logits
    return logits, example_targets(data, labels)[held], "validation"


def final_metrics(
    logits: np.ndarray, targets: np.ndarray, labels: list[str], evaluated_on: str
) -> tuple[dict[str, object], float, None]:
    """(metrics, temperature, no threshold) of a single-label model from held-out logits: the
    classification report, with ECE before and after calibration (none on training rows)."""
    temperature = calibrate(logits, targets) if evaluated_on != "training" else 1.0
    predicted = logits.argmax(axis=1).tolist()
    report = classification_report([labels[t] for t in targets.tolist()], [labels[p] for p in predicted])
    report["ece_uncalibrated"] = top1_ece(logits, targets)
    report["ece"] = top1_ece(logits, targets, temperature)
    report["temperature"] = temperature
    report["evaluated_on"] = evaluated_on
    return report, temperature, None


def in_scope_scoring(
    data: LabelledData,
    labels: list[str],
    rows: np.ndarray,
    logits: np.ndarray,
    temperature: float,
    hparams: HParams,
    vectors: SentenceVectors | None,
) -> InScope:
    """A single-label model's out-of-scope scoring (trainer.in_scope) from the held-out
    ``logits`` of ``data``'s ``rows`` (columns: ``labels``), its out-of-scope examples
    (OUT_OF_SCOPE_CLASS) left out; its neighbours are the distinct in-scope texts of ``data``
    (not every text ``vectors`` holds: a caller may have encoded others with them)."""
    in_scope = np.array([label != OUT_OF_SCOPE_CLASS for label in data.labels])
    held = in_scope[rows]
    neighbours, own = None, None
    if vectors is not None:
        texts = [vectors.index[text] for text, kept in zip(data.texts, in_scope, strict=True) if kept]
        distinct, inverse = np.unique(texts, return_inverse=True)
        position = np.cumsum(in_scope) - 1  # a row's place among the in-scope rows
        neighbours, own = vectors.matrix[distinct], inverse[position[rows[held]]]
    negatives = labels.index(OUT_OF_SCOPE_CLASS) if OUT_OF_SCOPE_CLASS in labels else None
    rate, weight = hparams.in_scope_rate, hparams.in_scope_neighbour_weight
    return fit_in_scope(logits[held], temperature, negatives, neighbours, own, rate, weight)


def multilabel_metrics(
    logits: np.ndarray, targets: np.ndarray, labels: list[str], evaluated_on: str
) -> tuple[dict[str, object], float, float]:
    """(metrics, temperature 1, threshold) of a multi-label model from held-out logits.

    The threshold is chosen on all the held-out scores (validation split or cross-fitting);
    the metrics are measured with each half of those rows decided at a threshold chosen on
    the other half (decide_on_other_half), so the choice does not flatter them. On training
    rows (no held-out scores) the threshold stays DEFAULT_THRESHOLD. The sigmoids are not
    temperature-scaled.
    """
    probabilities = torch.sigmoid(torch.from_numpy(logits)).numpy()
    truth = targets.astype(bool)
    if evaluated_on == "training":
        threshold, chosen = DEFAULT_THRESHOLD, decide(probabilities, DEFAULT_THRESHOLD)
    else:
        threshold, chosen = (
            choose_threshold(probabilities, truth)[0],
            decide_on_other_half(probabilities, truth),
        )
    report = multilabel_report(_label_sets(truth, labels), _label_sets(chosen, labels))
    report["threshold"] = threshold
    report["evaluated_on"] = evaluated_on
    return report, 1.0, threshold


def _label_sets(chosen: np.ndarray, labels: list[str]) -> list[list[str]]:
    """The labels of each row of a bool matrix (examples x classes)."""
    return [[labels[i] for i in np.flatnonzero(row)] for row in chosen]
