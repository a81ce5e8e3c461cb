"""train(): the single-learner training loop, with checkpoints, resume, progress and stop.

The loop is written with the parameter-server seams in place: ``compute_gradient`` is a
pure function of (weights, batch) and ``apply_update`` is the only place weights change,
so K learners can later compute gradients while one server applies them; the data order is
a ``DataCursor`` (epoch, permutation seed, position) per learner. Resume is a mode of the
same loop: the state restored from a checkpoint is the state the loop would have had.

Determinism: the initial weights come from a generator seeded with ``HParams.seed``, each
epoch's order from ``numpy.random.default_rng([seed, epoch])``, and nothing else draws
random numbers, so with K = 1 a stopped-and-resumed run ends with the same weights and the
same number of applied updates as an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from trainer import checkpoint as ckpt
from trainer.data import LabelledData, check_trainable, stratified_split
from trainer.errors import NonFiniteLoss, TrainerError, TrainingStopped
from trainer.evaluate import classification_report
from trainer.features import Bags, Featurizer, FeaturizerConfig
from trainer.hparams import DEFAULT_HPARAMS, HParams
from trainer.inference import bag_tensors, save_model
from trainer.model import ModelConfig, TextClassifier
from trainer.progress import Progress, ProgressReporter
from trainer.step import Batch, DataCursor, Optimizer, apply_update, compute_gradient


@dataclass(frozen=True)
class TrainResult:
    """What a finished training job produced."""

    model_dir: Path
    metrics: dict[str, object]
    applied_updates: int
    epochs: int
    resumed: int
    train_seconds: float


@dataclass(frozen=True)
class _Prepared:
    """Everything derived from the data and the hparams before the first update."""

    labels: list[str]
    featurizer: Featurizer
    train_bags: Bags
    train_targets: np.ndarray
    validation_bags: Bags | None
    validation_targets: np.ndarray | None
    steps_per_epoch: int
    max_epochs: int
    fingerprint: str


def _fingerprint(data: LabelledData) -> str:
    digest = hashlib.sha256()
    for text, label in zip(data.texts, data.labels, strict=True):
        digest.update(text.encode("utf-8") + b"\x00" + label.encode("utf-8") + b"\x01")
    return digest.hexdigest()


def _prepare(data: LabelledData, hparams: HParams, fingerprint: str) -> _Prepared:
    """Split, fit the featurizer on the training part, and plan the epochs.

    Validation split: a seeded stratified ``validation_fraction`` (classes with fewer than
    3 examples stay whole in training). When it would hold fewer than
    ``min_validation_rows`` examples, there is no split: on a few dozen examples a
    validation set of a handful of rows measures noise (one example is several points of
    accuracy), early stopping on it stops at random, and holding those rows out costs the
    model a large share of what it could learn. Then the model trains on all the data for
    a fixed number of updates instead; a linear model over normalised TF-IDF features
    does not overfit badly with more updates, so the fixed budget errs on the long side.
    """
    labels = data.classes
    class_id = {label: i for i, label in enumerate(labels)}
    targets = np.asarray([class_id[label] for label in data.labels], dtype=np.int64)
    train_idx, validation_idx = stratified_split(data.labels, hparams.validation_fraction, hparams.seed)
    if len(validation_idx) < hparams.min_validation_rows:
        train_idx, validation_idx = np.arange(len(data), dtype=np.int64), np.zeros(0, dtype=np.int64)
    config = FeaturizerConfig(
        word_ngrams=hparams.word_ngrams,
        char_ngram_min=hparams.char_ngram_min,
        char_ngram_max=hparams.char_ngram_max,
        buckets=hparams.buckets,
        max_features=hparams.max_features,
    )
    train_texts = [data.texts[i] for i in train_idx]
    featurizer = Featurizer.fit(train_texts, config)
    validation_bags = validation_targets = None
    if len(validation_idx):
        validation_bags = featurizer.transform([data.texts[i] for i in validation_idx])
        validation_targets = targets[validation_idx]
    steps_per_epoch = math.ceil(len(train_idx) / hparams.batch_size)
    return _Prepared(
        labels=labels,
        featurizer=featurizer,
        train_bags=featurizer.transform(train_texts),
        train_targets=targets[train_idx],
        validation_bags=validation_bags,
        validation_targets=validation_targets,
        steps_per_epoch=steps_per_epoch,
        max_epochs=max(hparams.max_epochs, math.ceil(hparams.min_updates / steps_per_epoch)),
        fingerprint=fingerprint,
    )


@dataclass
class _LoopState:
    """The loop's mutable state; exactly what a checkpoint holds besides weights and optimizer."""

    version: int
    cursor: DataCursor
    best_accuracy: float = -1.0
    best_loss: float = math.inf
    best_weights: dict[str, torch.Tensor] | None = None
    bad_epochs: int = 0
    finished: bool = False
    loss_sum: float = 0.0
    loss_count: int = 0
    last_epoch_loss: float | None = None
    checkpoints: int = 0
    resumed: int = 0
    train_seconds: float = 0.0
    last_checkpoint: str | None = field(default=None)


def _checkpoint_state(
    model: TextClassifier, optimizer: Optimizer, state: _LoopState, hparams: HParams, prepared: _Prepared
) -> dict[str, Any]:
    return {
        ckpt.WEIGHTS: model.state_dict(),
        ckpt.OPTIMIZER: optimizer.state_dict(),
        ckpt.VERSION: state.version,
        ckpt.CURSORS: [state.cursor.as_dict()],
        ckpt.RNG: {"torch": torch.get_rng_state()},
        ckpt.HPARAMS: hparams.as_dict(),
        ckpt.EARLY_STOP: {
            "best_accuracy": state.best_accuracy,
            "best_loss": state.best_loss,
            "best_weights": state.best_weights,
            "bad_epochs": state.bad_epochs,
            "finished": state.finished,
        },
        ckpt.DATA: {"fingerprint": prepared.fingerprint},
        ckpt.JOB: {
            "loss_sum": state.loss_sum,
            "loss_count": state.loss_count,
            "last_epoch_loss": state.last_epoch_loss,
            "checkpoints": state.checkpoints,
            "resumed": state.resumed,
            "train_seconds": state.train_seconds,
        },
    }


def _restore(saved: dict[str, Any], model: TextClassifier, optimizer: Optimizer) -> _LoopState:
    model.load_state_dict(saved[ckpt.WEIGHTS])
    optimizer.load_state_dict(saved[ckpt.OPTIMIZER])
    torch.set_rng_state(saved[ckpt.RNG]["torch"])
    early, job = saved[ckpt.EARLY_STOP], saved[ckpt.JOB]
    return _LoopState(
        version=int(saved[ckpt.VERSION]),
        cursor=DataCursor(**saved[ckpt.CURSORS][0]),
        best_accuracy=float(early["best_accuracy"]),
        best_loss=float(early["best_loss"]),
        best_weights=early["best_weights"],
        bad_epochs=int(early["bad_epochs"]),
        finished=bool(early["finished"]),
        loss_sum=float(job["loss_sum"]),
        loss_count=int(job["loss_count"]),
        last_epoch_loss=job["last_epoch_loss"],
        checkpoints=int(job["checkpoints"]),
        resumed=int(job["resumed"]) + 1,
        train_seconds=float(job["train_seconds"]),
    )


def _validate(model: TextClassifier, bags: Bags, targets: np.ndarray) -> tuple[float, float]:
    with torch.no_grad():
        logits = model(*bag_tensors(bags))
        loss = float(F.cross_entropy(logits, torch.from_numpy(targets)))
        accuracy = float((logits.argmax(dim=1).numpy() == targets).mean())
    return accuracy, loss


def _end_epoch(model: TextClassifier, state: _LoopState, prepared: _Prepared, hparams: HParams) -> None:
    """Early-stopping bookkeeping after the last update of an epoch, then move the cursor on.

    Better = higher validation accuracy, or equal accuracy with lower validation loss.
    """
    if prepared.validation_bags is not None and prepared.validation_targets is not None:
        accuracy, loss = _validate(model, prepared.validation_bags, prepared.validation_targets)
        if (accuracy, -loss) > (state.best_accuracy, -state.best_loss):
            state.best_accuracy, state.best_loss, state.bad_epochs = accuracy, loss, 0
            state.best_weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
        else:
            state.bad_epochs += 1
        if state.bad_epochs >= hparams.patience:
            state.finished = True
    if state.cursor.epoch >= prepared.max_epochs:
        state.finished = True
    state.cursor = DataCursor(epoch=state.cursor.epoch + 1, seed=state.cursor.seed)
    state.last_epoch_loss = state.loss_sum / max(state.loss_count, 1)
    state.loss_sum, state.loss_count = 0.0, 0


def train(
    data: LabelledData,
    *,
    workdir: Path,
    out_dir: Path,
    hparams: HParams = DEFAULT_HPARAMS,
    learners: int = 1,
    on_progress: Callable[[Progress], None] = lambda p: None,
    should_stop: Callable[[], bool] = lambda: False,
) -> TrainResult:
    """Train a classifier on ``data`` and write it to ``out_dir`` (created).

    ``workdir`` holds checkpoints (every ``checkpoint_every_updates`` updates or
    ``checkpoint_every_seconds`` seconds); if it already holds a valid one, training
    RESUMES from it, and that checkpoint's hyper-parameters win over ``hparams``.
    Calls ``on_progress`` about once a second and at each phase change. If
    ``should_stop()`` turns true (checked after every update), writes a checkpoint and
    raises TrainingStopped. Raises InvalidTrainingData (no examples, fewer than two
    classes), NonFiniteLoss, CheckpointCorrupt (checkpoint files exist, none usable),
    TrainerError (learners != 1, or the workdir's checkpoint is of other data).
    """
    with _single_threaded():
        return _train(
            data,
            workdir=Path(workdir),
            out_dir=Path(out_dir),
            hparams=hparams,
            learners=learners,
            on_progress=on_progress,
            should_stop=should_stop,
        )


@contextmanager
def _single_threaded() -> Iterator[None]:
    """One intra-op thread while training, restored afterwards.

    Mini-batches of 16 bags are too small to gain from intra-op threads, and on a busy
    machine OpenMP threads spin against other processes (a 6x slowdown measured on the
    2-core dev box); parallelism comes from learners. It also keeps results independent of
    the machine's core count.
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _train(
    data: LabelledData,
    *,
    workdir: Path,
    out_dir: Path,
    hparams: HParams,
    learners: int,
    on_progress: Callable[[Progress], None],
    should_stop: Callable[[], bool],
) -> TrainResult:
    if learners != 1:
        raise TrainerError(
            f"learners={learners}: only 1 is supported; the parameter-server engine is a separate issue"
        )
    check_trainable(data)
    session_start = time.monotonic()
    fingerprint = _fingerprint(data)
    saved = ckpt.load_latest(workdir)
    if saved is not None:
        if saved[ckpt.DATA]["fingerprint"] != fingerprint:
            raise TrainerError(f"{workdir} holds a checkpoint of different training data")
        hparams = HParams.from_dict(saved[ckpt.HPARAMS])

    booting = _LoopState(version=0, cursor=DataCursor(epoch=1, seed=hparams.seed))
    early = ProgressReporter(on_progress, hparams.progress_every_seconds, 0, 1, learners)
    _report(early, "preparing", booting)
    prepared = _prepare(data, hparams, fingerprint)
    model = TextClassifier(
        ModelConfig(rows=prepared.featurizer.rows, dim=hparams.embedding_dim, classes=len(prepared.labels)),
        generator=torch.Generator().manual_seed(hparams.seed),
    )
    optimizer = Optimizer(model, hparams.learning_rate)
    state = booting if saved is None else _restore(saved, model, optimizer)
    del saved

    reporter = ProgressReporter(
        on_progress,
        hparams.progress_every_seconds,
        prepared.max_epochs * prepared.steps_per_epoch,
        prepared.max_epochs,
        learners,
    )
    accounted = session_start

    def save_checkpoint() -> None:
        nonlocal accounted
        now = time.monotonic()
        state.train_seconds += now - accounted
        accounted = now
        state.checkpoints += 1
        state.last_checkpoint = str(
            ckpt.save(workdir, _checkpoint_state(model, optimizer, state, hparams, prepared))
        )

    _report(reporter, "training", state)
    rows = len(prepared.train_targets)
    order = state.cursor.order(rows)
    last_checkpoint_time = time.monotonic()
    last_checkpoint_version = state.version
    while not state.finished:
        chosen = order[state.cursor.position : state.cursor.position + hparams.batch_size]
        batch = Batch.of(prepared.train_bags.select(chosen), prepared.train_targets[chosen])
        loss, grads = compute_gradient(model, batch)
        if not math.isfinite(loss):
            raise NonFiniteLoss(state.version + 1, loss)
        apply_update(optimizer, grads)
        state.version += 1
        state.cursor.position += len(chosen)
        state.loss_sum += loss
        state.loss_count += 1
        reporter.samples += len(chosen)
        if state.cursor.position >= rows:
            _end_epoch(model, state, prepared, hparams)
            order = state.cursor.order(rows)
        if (
            state.version - last_checkpoint_version >= hparams.checkpoint_every_updates
            or time.monotonic() - last_checkpoint_time >= hparams.checkpoint_every_seconds
        ):
            save_checkpoint()
            last_checkpoint_time, last_checkpoint_version = time.monotonic(), state.version
        if should_stop():
            save_checkpoint()
            raise TrainingStopped(state.version, state.last_checkpoint)
        if reporter.due():
            _report(reporter, "training", state)

    _report(reporter, "evaluating", state)
    if state.best_weights is not None:
        model.load_state_dict(state.best_weights)
    metrics = _final_metrics(model, prepared, data)
    _report(reporter, "saving", state)
    state.train_seconds += time.monotonic() - accounted
    epochs = min(state.cursor.epoch - 1, prepared.max_epochs)
    save_model(
        out_dir,
        model,
        prepared.featurizer,
        prepared.labels,
        {
            "hparams": hparams.as_dict(),
            "metrics": metrics,
            "applied_updates": state.version,
            "epochs": epochs,
            "train_seconds": state.train_seconds,
        },
    )
    _report(reporter, "done", state)
    return TrainResult(
        model_dir=out_dir,
        metrics=metrics,
        applied_updates=state.version,
        epochs=epochs,
        resumed=state.resumed,
        train_seconds=state.train_seconds,
    )


def _report(reporter: ProgressReporter, phase: str, state: _LoopState) -> None:
    reporter.report(
        phase,
        epoch=state.cursor.epoch - 1 if state.finished else state.cursor.epoch,
        step=state.version,
        loss=state.loss_sum / state.loss_count if state.loss_count else state.last_epoch_loss,
        checkpoints=state.checkpoints,
        resumed=state.resumed,
    )


def _final_metrics(model: TextClassifier, prepared: _Prepared, data: LabelledData) -> dict[str, object]:
    """Metrics on the validation split, or on the training data when there was no split."""
    if prepared.validation_bags is not None and prepared.validation_targets is not None:
        bags, targets, evaluated_on = prepared.validation_bags, prepared.validation_targets, "validation"
    else:
        bags, targets, evaluated_on = prepared.train_bags, prepared.train_targets, "training"
    with torch.no_grad():
        predicted = model(*bag_tensors(bags)).argmax(dim=1).tolist()
    labels = prepared.labels
    report = classification_report([labels[t] for t in targets.tolist()], [labels[p] for p in predicted])
    report["evaluated_on"] = evaluated_on
    return report
