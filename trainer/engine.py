"""train(): K learners around the embedded parameter server, with checkpoints, resume, stop.

The supervisor (this module, in the caller's process) owns the epoch plan: every epoch's
permutation is split into K shards (learner r takes every K-th row), and the learners work in
*rounds* (trainer.ps.pool): a round ends when every learner has parked, at the end of its
shard or after the supervisor asked them to pause. Between rounds the state is consistent
at one version, and that is where validation, early stopping and checkpoints happen. Resume
is a mode of the same loop: the state restored from a checkpoint is the state the loop had.
K = 1 runs the same learner in-process (no spawn), the plain loop's speed.

Determinism: the initial weights come from a generator seeded with ``HParams.seed``, each
epoch's order from ``numpy.random.default_rng([seed, epoch])``, and nothing else draws
random numbers, so with K = 1 a stopped-and-resumed run ends with the same weights and the
same number of applied updates as an uninterrupted one. With K > 1 the interleaving of
updates varies; the number of applied updates of a run without early stopping does not.

Multi-label mode (``train(..., multi_label=True)``) is the same loop on other examples and
targets: the rows grouped by text (trainer.data.MultiLabelData), a multi-hot target matrix,
one sigmoid per class trained with binary cross-entropy, a validation score of micro-F1, and
one decision threshold chosen on the held-out scores (docs/model.md, "Multi-label").
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from trainer import checkpoint as ckpt
from trainer.averaging import IterateSum, SnapshotPlan
from trainer.calibration import calibrate, top1_ece
from trainer.data import (
    LabelledData,
    MultiLabelData,
    check_trainable,
    multilabel_split,
    stratified_folds,
    stratified_split,
)
from trainer.encoder import SentenceEncoder, encoder_threads
from trainer.errors import (
    CheckpointCorrupt,
    InvalidTrainingData,
    NonFiniteLoss,
    TrainerError,
    TrainingStopped,
    WeightsOutOfBounds,
)
from trainer.evaluate import (
    DEFAULT_THRESHOLD,
    choose_threshold,
    classification_report,
    decide,
    decide_on_other_half,
    multilabel_report,
)
from trainer.features import Bags, Featurizer, FeaturizerConfig
from trainer.folds import FoldRuns
from trainer.hparams import DEFAULT_HPARAMS, HParams
from trainer.inference import LoadedModel, bag_tensors, save_model
from trainer.model import ModelConfig, TextClassifier
from trainer.progress import Progress, ProgressReporter
from trainer.ps import counters as C
from trainer.ps.cuda import StreamPool, cuda_learners
from trainer.ps.graph import GraphPool
from trainer.ps.learner import ShardData
from trainer.ps.pool import InProcessPool, ProcessPool, RoundResult, SuspectState, forgetting_freed_storages
from trainer.ps.server import OptimizerConfig, ParameterServer
from trainer.ps.stripes import default_stripes
from trainer.sentence_features import SentenceInput, SentenceVectors, describe_model, encode_texts
from trainer.step import (
    DataCursor,
    TextClassifierTask,
    epoch_updates,
    model_parameters,
    multi_label_loss,
    shard_lengths,
)

log = logging.getLogger(__name__)

MAX_RESTARTS = 2  # sessions restarted from the last checkpoint after a suspect state, per call
# a training that diverges starts over at half the learning rate, at most this many times a call
# (down to 1/8 of it): plain SGD at the fixed rate diverged on multi-label data whose texts
# carry many labels each (docs/model.md, "Multi-label")
MAX_DIVERGENCE_RETRIES = 3

TrainingData = LabelledData | MultiLabelData  # single-label rows, or multi-label examples


@dataclass(frozen=True)
class TrainResult:
    """What a finished training job produced."""

    model_dir: Path
    metrics: dict[str, object]
    applied_updates: int
    epochs: int
    resumed: int
    train_seconds: float
    learners: int = 1
    ps: dict[str, object] = field(default_factory=dict)  # the server's counters (PSStats fields)


@dataclass(frozen=True)
class _Prepared:
    """Everything derived from the data and the hparams before the first update."""

    labels: list[str]
    multi_label: bool
    featurizer: Featurizer
    sentence: SentenceInput | None  # how the encoder's embedding enters the bags (None: n-grams only)
    train_bags: Bags
    train_targets: np.ndarray  # class ids, or multi-hot rows (see _targets)
    validation_bags: Bags | None
    validation_targets: np.ndarray | None
    steps_per_epoch: int
    max_epochs: int
    fingerprint: str
    # the most embedding rows one mini-batch pushes, repeats counted (SGD pushes them as they
    # are); unique rows (Adam) are at most the featurizer's rows too
    max_rows: int
    class_weights: torch.Tensor | None  # the loss's per-class weights (_class_weights)

    @property
    def rows(self) -> int:
        """The model's embedding rows: the n-grams', then the sentence embedding's."""
        return self.featurizer.rows + (self.sentence.dim if self.sentence is not None else 0)


def _fingerprint(data: TrainingData, vectors: SentenceVectors | None) -> str:
    """SHA-256 of the examples (and of the encoder's weights, if any); a multi-label run's
    differs from a single-label run's of the same rows, and an encoder run's from an n-gram
    run's, so that neither resumes the other's checkpoint."""
    digest = hashlib.sha256()
    if isinstance(data, MultiLabelData):
        digest.update(b"multi-label\x00")
    if vectors is not None:
        digest.update(f"encoder {vectors.encoder} {vectors.sha256} {vectors.layers}\x00".encode())
    for text, label in zip(data.texts, data.strata, strict=True):
        digest.update(text.encode("utf-8") + b"\x00" + label.encode("utf-8") + b"\x01")
    return digest.hexdigest()


def _targets(data: TrainingData, labels: list[str]) -> np.ndarray:
    """Each example's target: its class id (int64), or for multi-label data a multi-hot row
    (examples x classes, uint8: a quarter of float32's memory at 20,000 x 3,000, turned into
    float per mini-batch)."""
    column = {label: i for i, label in enumerate(labels)}
    if isinstance(data, LabelledData):
        return np.asarray([column[label] for label in data.labels], dtype=np.int64)
    hot = np.zeros((len(data), len(labels)), dtype=np.uint8)
    for row, label_set in enumerate(data.label_sets):
        hot[row, [column[label] for label in label_set]] = 1
    return hot


def _split(data: TrainingData, hparams: HParams) -> tuple[np.ndarray, np.ndarray]:
    """The seeded (train, validation) rows: stratified by class, or multilabel_split's; every
    row in training and none held out when the validation part would hold fewer than
    ``min_validation_rows`` (see _prepare)."""
    if isinstance(data, MultiLabelData):
        train_idx, validation_idx = multilabel_split(
            data.label_sets, hparams.validation_fraction, hparams.seed
        )
    else:
        train_idx, validation_idx = stratified_split(data.labels, hparams.validation_fraction, hparams.seed)
    if len(validation_idx) < hparams.min_validation_rows:
        return np.arange(len(data), dtype=np.int64), np.zeros(0, dtype=np.int64)
    return train_idx, validation_idx


def _prepare(
    data: TrainingData,
    hparams: HParams,
    fingerprint: str,
    split: tuple[np.ndarray, np.ndarray],
    vectors: SentenceVectors | None,
) -> _Prepared:
    """Fit the featurizer on the training part of ``split`` (_split's) and plan the epochs.

    Validation split: a seeded stratified ``validation_fraction`` (classes with fewer than
    3 examples stay whole in training; multi-label data: see multilabel_split). When it
    would hold fewer than
    ``min_validation_rows`` examples, there is no split: on a few dozen examples a
    validation set of a handful of rows measures noise (one example is several points of
    accuracy), early stopping on it stops at random, and holding those rows out costs the
    model a large share of what it could learn. Then the model trains on all the data for
    a fixed number of updates instead (a linear model over normalised TF-IDF features
    does not overfit badly with more updates, so the fixed budget errs on the long side),
    and its held-out scores come from cross-fitting (_cross_fit).
    """
    labels = data.classes
    targets = _targets(data, labels)
    train_idx, validation_idx = split
    config = FeaturizerConfig(
        word_ngrams=hparams.word_ngrams,
        char_ngram_min=hparams.char_ngram_min,
        char_ngram_max=hparams.char_ngram_max,
        buckets=hparams.buckets,
        max_features=hparams.max_features,
    )
    train_texts = [data.texts[i] for i in train_idx]
    featurizer, train_bags = Featurizer.fit_transform(train_texts, config)
    sentence = (
        None
        if vectors is None
        else SentenceInput(
            vectors.encoder,
            vectors.sha256,
            vectors.layers,
            vectors.dim,
            hparams.encoder_scale,
            featurizer.rows,
            hparams.encoder_ngram_scale,
        )
    )
    if sentence is not None and vectors is not None:
        train_bags = sentence.append(train_bags, vectors.of(train_texts))
    validation_bags = validation_targets = None
    if len(validation_idx):
        validation_texts = [data.texts[i] for i in validation_idx]
        validation_bags = featurizer.transform(validation_texts)
        if sentence is not None and vectors is not None:
            validation_bags = sentence.append(validation_bags, vectors.of(validation_texts))
        validation_targets = targets[validation_idx]
    steps_per_epoch = math.ceil(len(train_idx) / hparams.batch_size)
    lengths = np.diff(np.append(train_bags.offsets, len(train_bags.ids)))
    max_rows = int(np.sort(lengths)[::-1][: hparams.batch_size].sum())
    return _Prepared(
        labels=labels,
        multi_label=isinstance(data, MultiLabelData),
        featurizer=featurizer,
        sentence=sentence,
        train_bags=train_bags,
        train_targets=targets[train_idx],
        validation_bags=validation_bags,
        validation_targets=validation_targets,
        steps_per_epoch=steps_per_epoch,
        max_epochs=max(hparams.max_epochs, math.ceil(hparams.min_updates / steps_per_epoch)),
        fingerprint=fingerprint,
        max_rows=max(1, max_rows),
        class_weights=_class_weights(
            targets[train_idx], len(labels), hparams.class_balance, hparams.batch_size
        ),
    )


def _initial_model(prepared: _Prepared, hparams: HParams) -> TextClassifier:
    """The model a training starts from, seeded (a checkpoint, if any, is restored over it).

    The biases start at zero, except a multi-label model's of more than
    ``hparams.multi_label_prior_classes`` classes: those start at each class's log-odds in the
    training rows, where a logistic regression with no evidence would put them. At zero every
    sigmoid starts at 0.5, and a text's first steps move its logits by the sum of all C class
    codes, whose cross-talk grows as the square root of C: plain SGD at the fixed rate diverged
    from 300 classes (docs/model.md). From the prior a class a text lacks pushes by its share.
    Reuters' 95 classes train better from zero (the prior stops early stopping sooner).
    """
    model = TextClassifier(
        ModelConfig(rows=prepared.rows, dim=hparams.embedding_dim, classes=len(prepared.labels)),
        generator=torch.Generator().manual_seed(hparams.seed),
        embedding_init=hparams.embedding_init,
        output_init=hparams.output_init,
    )
    if prepared.multi_label and len(prepared.labels) > hparams.multi_label_prior_classes:
        positives = prepared.train_targets.sum(axis=0, dtype=np.float64)
        share = (positives + 0.5) / (len(prepared.train_targets) + 1.0)  # no class at 0 or 1
        with torch.no_grad():
            model.output.bias.copy_(torch.from_numpy(np.log(share / (1.0 - share))))
    return model


def _class_weights(targets: np.ndarray, classes: int, balance: float, batch: int) -> torch.Tensor | None:
    """The single-label loss's class weights, ``(rows / (classes x class rows)) ** balance``
    from the training rows, at most ``batch - 1`` times the lightest class's weight (None:
    multi-label data, or no balancing).

    A batch's loss is the weighted mean (TextClassifierTask), so only the weights' ratios
    matter, and the cap bounds them: one example of a rare class counts as at most
    ``batch - 1`` of the commonest class's, and takes at most about half the step of a batch
    whose other rows are of that class. Uncapped, a class of one row among 200 took three
    quarters of a step; when its text was also another class's (NLC rows of several classes,
    in single-label mode), SGD's steps on the two grew without bound. A cap of 15 on the
    weight itself did not bound the ratio: five one-row classes among 205 rows pushed the two
    big classes' weights down to 0.3 and 0.26, each one-row class counted as 50 of their rows,
    and one that shared a word ("please") with half the rows took 14 of its big class's 86
    (cross-validation accuracy 0.863; 0.951 with this cap).
    """
    if targets.ndim != 1 or balance == 0:
        return None
    counts = np.bincount(targets, minlength=classes).astype(np.float64)
    weights = np.where(counts > 0, len(targets) / (classes * np.maximum(counts, 1)), 1.0) ** balance
    weights = np.minimum(weights, max(1, batch - 1) * weights[counts > 0].min(initial=1.0))
    return torch.from_numpy(weights.astype(np.float32))


@dataclass
class _LoopState:
    """The loop's mutable state; exactly what a checkpoint holds besides weights and optimizer."""

    epoch: int
    seed: int
    positions: list[int]  # each learner's committed position in its shard of ``epoch``
    best_accuracy: float = -1.0  # the best validation score: accuracy, or micro-F1 (multi-label)
    best_loss: float = math.inf  # the validation loss of the best-scoring epoch
    lowest_loss: float = math.inf  # the lowest validation loss of any epoch
    best_weights: dict[str, torch.Tensor] | None = None
    iterates: IterateSum = field(default_factory=IterateSum)  # this epoch's snapshots so far
    bad_epochs: int = 0  # epochs since the last one that made progress (_end_epoch)
    lr_cuts: int = 0  # epochs without progress so far (OptimizerConfig.rate)
    finished: bool = False
    loss_sum: float = 0.0
    loss_count: int = 0
    last_epoch_loss: float | None = None
    validation_accuracy: float | None = None  # the score of the last epoch's end; None without a split
    checkpoints: int = 0
    resumed: int = 0
    train_seconds: float = 0.0
    last_checkpoint: str | None = field(default=None)
    # pushed / applied of earlier sessions (this session's come from the counters)
    earlier: dict[str, int] = field(default_factory=lambda: {"pushed": 0, "applied": 0})


_NAMES = ("embedding.weight", "output.weight", "output.bias")  # model_parameters() order


MIN_STEPS_PER_LEARNER = 32  # auto K gives each learner at least this many steps per epoch


def default_learners() -> int:
    """The most learners auto (K = 0) uses: the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def auto_learners(steps_per_epoch: int) -> int:
    """K for ``learners=0``: one per core, but no more than the data keeps busy.

    Every epoch ends in a round barrier (validation, early stopping) that every learner
    waits at, and learner processes cost their start (forks of the trainer's fork server,
    whose own start imports the trainer once per worker); a data set of a few dozen rows
    (a handful of steps per epoch) trains faster in-process than split across cores.
    """
    return max(1, min(default_learners(), steps_per_epoch // MIN_STEPS_PER_LEARNER))


def _checkpoint_state(
    ps: ParameterServer, state: _LoopState, hparams: HParams, prepared: _Prepared
) -> dict[str, Any]:
    snapshot = ps.snapshot()
    stats = ps.stats()
    return {
        ckpt.WEIGHTS: dict(zip(_NAMES, snapshot["params"], strict=True)),
        ckpt.OPTIMIZER: {"kind": snapshot["kind"], "state": snapshot["state"]},
        ckpt.VERSION: snapshot["version"],
        ckpt.CURSORS: [
            DataCursor(epoch=state.epoch, seed=state.seed, position=p).as_dict() for p in state.positions
        ],
        ckpt.RNG: {
            "torch": torch.get_rng_state(),
            "learner_seeds": [state.seed + r for r in range(len(state.positions))],
        },
        ckpt.HPARAMS: hparams.as_dict(),
        ckpt.EARLY_STOP: {
            "best_accuracy": state.best_accuracy,
            "best_loss": state.best_loss,
            "lowest_loss": state.lowest_loss,
            "best_weights": state.best_weights,
            "iterates": state.iterates.as_dict(),
            "bad_epochs": state.bad_epochs,
            "lr_cuts": state.lr_cuts,
            "finished": state.finished,
        },
        ckpt.DATA: {"fingerprint": prepared.fingerprint},
        ckpt.JOB: {
            "loss_sum": state.loss_sum,
            "loss_count": state.loss_count,
            "last_epoch_loss": state.last_epoch_loss,
            "validation_accuracy": state.validation_accuracy,
            "checkpoints": state.checkpoints,
            "resumed": state.resumed,
            "train_seconds": state.train_seconds,
            "learners": len(state.positions),
            "pushed": state.earlier["pushed"] + stats.pushed,
            "applied": state.earlier["applied"] + stats.applied,
        },
    }


def _restore(saved: dict[str, Any], ps: ParameterServer) -> _LoopState:
    ps.restore(
        {
            "kind": saved[ckpt.OPTIMIZER]["kind"],
            "params": [saved[ckpt.WEIGHTS][name] for name in _NAMES],
            "state": saved[ckpt.OPTIMIZER]["state"],
            "version": saved[ckpt.VERSION],
        }
    )
    torch.set_rng_state(saved[ckpt.RNG]["torch"])
    early, job, cursors = saved[ckpt.EARLY_STOP], saved[ckpt.JOB], saved[ckpt.CURSORS]
    return _LoopState(
        epoch=int(cursors[0]["epoch"]),
        seed=int(cursors[0]["seed"]),
        positions=[int(c["position"]) for c in cursors],
        best_accuracy=float(early["best_accuracy"]),
        best_loss=float(early["best_loss"]),
        lowest_loss=float(early.get("lowest_loss", early["best_loss"])),  # absent in older checkpoints
        best_weights=early["best_weights"],
        iterates=IterateSum.from_dict(early.get("iterates"), ps.params[0].device),  # absent in older ones
        bad_epochs=int(early["bad_epochs"]),
        lr_cuts=int(early.get("lr_cuts", 0)),  # absent in older checkpoints
        finished=bool(early["finished"]),
        loss_sum=float(job["loss_sum"]),
        loss_count=int(job["loss_count"]),
        last_epoch_loss=job["last_epoch_loss"],
        validation_accuracy=job.get("validation_accuracy"),  # absent in older checkpoints
        checkpoints=int(job["checkpoints"]),
        resumed=int(job["resumed"]) + 1,
        train_seconds=float(job["train_seconds"]),
        earlier={k: int(job.get(k, 0)) for k in ("pushed", "applied")},
    )


def _logits(model: TextClassifier, bags: Bags) -> torch.Tensor:
    device = model.output.weight.device
    with torch.no_grad():
        return model(*(t.to(device) for t in bag_tensors(bags))).cpu()


def _validate(
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


def _end_epoch(model: TextClassifier, state: _LoopState, prepared: _Prepared, hparams: HParams) -> None:
    """Early-stopping bookkeeping after the last update of an epoch, then move the cursors on.

    The weights kept are the best epoch's: the higher validation score (_validate), or an
    equal score with a lower validation loss. An epoch makes progress when it is the best so
    far or its validation loss is the lowest so far; ``patience`` epochs in a row without
    progress stop training, and each cuts the learning rate. Loss counts as progress because
    a model far from a solution (many classes, few rows each: benchmarks/many_classes.py)
    can lower the loss for epochs before the top-1 score moves, and stopping on the score
    alone ended such runs with a third of their classes learned.
    """
    if prepared.validation_bags is not None and prepared.validation_targets is not None:
        score, loss = _validate(
            model, prepared.validation_bags, prepared.validation_targets, prepared.multi_label
        )
        state.validation_accuracy = score
        best = (score, -loss) > (state.best_accuracy, -state.best_loss)
        if best:
            state.best_accuracy, state.best_loss = score, loss
            state.best_weights = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        if best or loss < state.lowest_loss:
            state.bad_epochs = 0
        else:
            state.bad_epochs += 1
            state.lr_cuts += 1
        state.lowest_loss = min(state.lowest_loss, loss)
        if state.bad_epochs >= hparams.patience:
            state.finished = True
    if state.epoch >= prepared.max_epochs:
        state.finished = True
    state.epoch += 1
    state.positions = [0] * len(state.positions)
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
    device: str = "cpu",
    multi_label: bool = False,
    encoder: SentenceEncoder | None = None,
    vectors: SentenceVectors | None = None,
) -> TrainResult:
    """Train a classifier on ``data`` with ``learners`` learners and write it to ``out_dir``.

    ``encoder``: the shared pretrained sentence encoder whose embedding of each text joins its
    n-grams (trainer.sentence_features), or None for the n-gram model alone. The texts are
    encoded first, on every core (phase "encoding"), and the embeddings kept in ``workdir``
    for a resume. ``vectors``: instead, the embeddings of every text, computed by the caller
    (encode_texts; a sweep over many subsets of one data set encodes it once).

    ``multi_label``: every row with the same text is one example whose labels are the union
    of those rows' (LabelledData.grouped), and the model gets one sigmoid per class and a
    decision threshold; the metrics are multilabel_report's plus ``threshold``. Otherwise
    each row is one example of one class.

    ``learners``: K learner processes sharing one parameter server (1 = in-process; 0 =
    auto: one per core, fewer for data too small to keep them busy, see auto_learners;
    never more than an epoch has mini-batches).
    ``workdir`` holds checkpoints (every ``checkpoint_every_updates`` updates or
    ``checkpoint_every_seconds`` seconds); if it already holds a valid one, training RESUMES
    from it, and that checkpoint's hyper-parameters and learner count win over the
    arguments. Calls ``on_progress`` about once a second and at each phase change. If
    ``should_stop()`` turns true (checked after every update with K = 1, every ~50 ms with
    K > 1), writes a checkpoint and raises TrainingStopped. A learner that dies is respawned
    at its committed cursor; if it died while applying, the session restarts from the last
    checkpoint. A training that diverges starts over at half the learning rate, up to
    MAX_DIVERGENCE_RETRIES times (_train_steadied). Raises InvalidTrainingData (no examples,
    fewer than two classes), NonFiniteLoss or WeightsOutOfBounds (it diverged at every rate),
    CheckpointCorrupt (checkpoint files exist, none usable), TrainerError (learners < 0, the
    workdir's checkpoint is of other data, learners kept dying, no CUDA).

    ``device``: "cpu", "cuda" or "auto" (CUDA when available). On CUDA, one SGD learner
    replays its steps as CUDA graphs, 16 a chunk (trainer.ps.graph; ``learners=0`` means this
    one, and a stop is seen between chunks); Adam, or K > 1 asked for, runs K learners as
    CUDA streams of this process sharing one GPU (trainer.ps.cuda).
    """
    if learners < 0:
        raise TrainerError(f"learners={learners}: must be 0 (auto) or more")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda") or (device == "cuda" and not torch.cuda.is_available()):
        raise TrainerError(f"device {device!r} is not available here")
    if vectors is None and encoder is not None:
        vectors = _encode(encoder, data, Path(workdir), hparams, learners, on_progress, should_stop)
    with _single_threaded(), forgetting_freed_storages():
        for attempt in range(MAX_RESTARTS + 1):
            try:
                return _train_steadied(
                    data.grouped() if multi_label else data,
                    workdir=Path(workdir),
                    out_dir=Path(out_dir),
                    hparams=hparams,
                    learners=learners,
                    on_progress=on_progress,
                    should_stop=should_stop,
                    device=torch.device(device),
                    cross_fit=True,
                    vectors=vectors,
                )
            except SuspectState as exc:
                if attempt == MAX_RESTARTS:
                    raise TrainerError(f"training restarted {attempt} times and failed again: {exc}") from exc
                log.warning("training session abandoned (%s); restarting from the last checkpoint", exc)
    raise AssertionError("unreachable")


def _encode(
    encoder: SentenceEncoder,
    data: TrainingData,
    workdir: Path,
    hparams: HParams,
    learners: int,
    on_progress: Callable[[Progress], None],
    should_stop: Callable[[], bool],
) -> SentenceVectors:
    """Phase "encoding": the sentence embeddings of every text, on all cores (kept in
    ``workdir`` for a resume). Its progress counts texts (``step`` of ``total_steps``, with an
    ETA), and a stop is seen between batches: a minute on 10,000 texts is too long to ignore a
    cancel. Nothing is checkpointed then (TrainingStopped at update 0, no file)."""
    reporter = ProgressReporter(
        on_progress, hparams.progress_every_seconds, len(set(data.texts)), 1, max(learners, 1)
    )

    def batch_done(done: int) -> None:
        if should_stop():
            raise TrainingStopped(0, None)
        if reporter.due():
            reporter.report("encoding", epoch=1, step=done, loss=None, checkpoints=0, resumed=0)

    reporter.report("encoding", epoch=1, step=0, loss=None, checkpoints=0, resumed=0)
    with encoder_threads(default_learners()):
        return encode_texts(encoder, data.texts, cache_dir=workdir, on_batch=batch_done)


def _train_steadied(data: TrainingData, *, workdir: Path, hparams: HParams, **kwargs: Any) -> TrainResult:
    """_train; when it diverges (a non-finite loss, or weights no model loader takes), again from
    the start at half the learning rate, up to MAX_DIVERGENCE_RETRIES times, then the error.

    The summed binary cross-entropy of a multi-label text grows with its labels, and so does
    plain SGD's step at the fixed rate: texts of 15 to 20 labels each (of 30 to 100 classes)
    made the loss infinite within a hundred updates, a job Failed that half the rate trains to
    a micro-F1 of 0.99 (docs/model.md). Data that trains at the fixed rate never comes here,
    so its model is unchanged. The halved rate is in the hparams, so the checkpoints of the new
    start (and the fold models of its cross-fitting) carry it and a resume keeps it; the
    diverged run's checkpoints are discarded, since resuming from them would resume its rate.
    """
    for retry in range(MAX_DIVERGENCE_RETRIES + 1):
        try:
            return _train(data, workdir=workdir, hparams=hparams, **kwargs)
        except (NonFiniteLoss, WeightsOutOfBounds) as exc:
            if retry == MAX_DIVERGENCE_RETRIES:
                raise
            used = _checkpoint_hparams(workdir) or hparams  # a checkpoint's win over the argument
            hparams = replace(used, learning_rate=used.learning_rate / 2)
            for _, path in ckpt.list_checkpoints(workdir):
                path.unlink(missing_ok=True)
            log.warning(
                "training diverged (%s); starting over at learning rate %g", exc, hparams.learning_rate
            )
    raise AssertionError("unreachable")


def _checkpoint_hparams(workdir: Path) -> HParams | None:
    """The hyper-parameters of the newest usable checkpoint in ``workdir`` (those a resume
    trains with), or None."""
    try:
        saved = ckpt.load_latest(workdir)
    except CheckpointCorrupt:
        return None
    if saved is None or "kind" not in saved[ckpt.OPTIMIZER]:  # none, or one _train starts over from
        return None
    return HParams.from_dict(saved[ckpt.HPARAMS])


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
    data: TrainingData,
    *,
    workdir: Path,
    out_dir: Path,
    hparams: HParams,
    learners: int,
    on_progress: Callable[[Progress], None],
    should_stop: Callable[[], bool],
    device: torch.device,
    cross_fit: bool,
    vectors: SentenceVectors | None,
) -> TrainResult:
    """One training session (see train); ``cross_fit`` False trains a fold model of _cross_fit;
    ``vectors``: the sentence embeddings of every text of ``data`` (None: n-grams only)."""
    check_trainable(data)
    on_cuda = device.type == "cuda"
    session_start = time.monotonic()
    fingerprint = _fingerprint(data, vectors)
    saved = ckpt.load_latest(workdir)
    if saved is not None and "kind" not in saved[ckpt.OPTIMIZER]:
        saved = None  # written by the single-learner loop before the parameter server: start over
    if saved is not None:
        if saved[ckpt.DATA]["fingerprint"] != fingerprint:
            raise TrainerError(f"{workdir} holds a checkpoint of different training data")
        hparams = HParams.from_dict(saved[ckpt.HPARAMS])
        learners = len(saved[ckpt.CURSORS])  # the cursors are per learner: resume with the same K

    split = _split(data, hparams)
    steps = math.ceil(len(split[0]) / hparams.batch_size)  # an epoch's mini-batches
    if not learners:  # auto
        learners = cuda_learners(hparams.optimizer) if on_cuda else auto_learners(steps)
    elif saved is None and learners > steps > 0:
        # a learner per mini-batch at most: more split the epoch into shards of less than a
        # batch, each a step, and the plan's epochs ran K steps each, not ``steps`` (16
        # learners on a 60-row set: four times the updates, five times the seconds of K = 1)
        log.info("%d learners asked for, %d used: an epoch has %d mini-batches", learners, steps, steps)
        learners = steps
    # Learner processes start now, so their start-up overlaps featurisation.
    processes = ProcessPool(learners, default_stripes(learners)) if learners > 1 and not on_cuda else None
    pool: InProcessPool | ProcessPool | StreamPool | GraphPool | None = processes
    folds: FoldRuns[_FoldLogits] | None = None
    try:
        early = ProgressReporter(on_progress, hparams.progress_every_seconds, 0, 1, learners)
        early.report("preparing", epoch=1, step=0, loss=None, checkpoints=0, resumed=0)
        prepared = _prepare(data, hparams, fingerprint, split, vectors)
        # no n-gram at all (the featurizer has already read every training text) and no sentence
        # embedding; the whole data only: a fold of a few rows may hold none with a word, and
        # trains to uniform scores
        if cross_fit and prepared.rows == 0:
            raise InvalidTrainingData(0, "no text has a letter or a digit: there is nothing to learn from")
        # one example (a multi-label text) leaves its fold model nothing to learn from
        cross_fitting = (
            cross_fit and prepared.validation_bags is None and hparams.cross_fit_folds > 1 and len(data) > 1
        )
        if cross_fitting:  # the fold models train beside the final one (trainer.folds)
            folds = _start_folds(data, prepared.labels, hparams, vectors)
        model = _initial_model(prepared, hparams)
        optimizer = OptimizerConfig(
            kind=hparams.optimizer,
            lr=hparams.learning_rate,
            plateau_factor=hparams.lr_plateau_factor,
            staleness_bound=hparams.staleness_bound,
        )
        ps = ParameterServer.create(
            model_parameters(model),
            optimizer,
            learners,
            # slot capacity; capped at the vocabulary only for unique rows: long texts of a small
            # vocabulary pushed more rows than it has, and every learner died on its first push
            min(prepared.max_rows, prepared.rows) if optimizer.needs_unique_rows else prepared.max_rows,
            shared=processes is not None,
            device=device,
            locks=processes.locks() if processes is not None else None,
        )
        # The model reads the server's tensors from here on (validation, best weights, the saved model).
        for param, shared in zip(model.parameters(), ps.params, strict=True):
            param.data = shared
        state = (
            _LoopState(epoch=1, seed=hparams.seed, positions=[0] * learners)
            if saved is None
            else _restore(saved, ps)
        )
        del saved
        data_tensors = ShardData.of(prepared.train_bags, prepared.train_targets, shared=processes is not None)
        task = partial(
            TextClassifierTask,
            unique_rows=optimizer.needs_unique_rows,
            multi_label=prepared.multi_label,
            class_weights=prepared.class_weights,
        )
        if processes is not None:
            processes.start(ps, task(), data_tensors, hparams.batch_size, state.seed)
        elif on_cuda and learners == 1 and optimizer.kind == "sgd":
            pool = GraphPool(
                ps, data_tensors, hparams.batch_size, state.seed, device, class_weights=prepared.class_weights
            )
        elif on_cuda:
            pool = StreamPool(ps, task, data_tensors, hparams.batch_size, state.seed, device)
        else:
            pool = InProcessPool(ps, task(), data_tensors, hparams.batch_size, state.seed)
        assert pool is not None
        session = _Session(
            ps, pool, state, hparams, prepared, workdir, on_progress, should_stop, session_start
        )
        session.run(model)
        if folds is not None:  # a stop while the folds train resumes here, not from mid-training
            session.save_checkpoint()
        codes = pool.close() if pool is not None else None
        pool = None
        if any(code not in (0, None) for code in codes or []):
            # Every learner parked after the last round and its slots were drained: the
            # parameters are complete, so a learner lost now (a kill, the OOM killer) costs nothing.
            log.warning("a learner exited abnormally after the last round (exit codes %s)", codes)

        session.report("evaluating")
        if state.best_weights is not None:
            model.load_state_dict(state.best_weights)
        model.cpu()  # CUDA: evaluate and save from host memory (a no-op on CPU)
        try:
            logits, targets, evaluated_on = (
                _cross_fit(data, prepared.labels, folds, should_stop)
                if folds is not None
                else _held_out(model, prepared)
            )
        except TrainingStopped:
            raise TrainingStopped(ps.version(), state.last_checkpoint) from None
    finally:
        if pool is not None:
            pool.close()
        if folds is not None:
            folds.close()
    metrics, temperature, threshold = (
        _multilabel_metrics(logits, targets, prepared.labels, evaluated_on)
        if prepared.multi_label
        else _final_metrics(logits, targets, prepared.labels, evaluated_on)
    )
    metrics["model"] = describe_model(prepared.sentence)
    session.report("saving")
    state.train_seconds += time.monotonic() - session.accounted
    epochs = min(state.epoch - 1, prepared.max_epochs)
    stats = session.ps_stats()
    save_model(
        out_dir,
        model,
        prepared.featurizer,
        prepared.labels,
        temperature,
        {
            "hparams": hparams.as_dict(),
            "temperature": temperature,
            "metrics": metrics,
            "applied_updates": ps.version(),
            "epochs": epochs,
            "train_seconds": state.train_seconds,
            "learners": learners,
            "ps": stats,
        },
        threshold,
        sentence=prepared.sentence,
    )
    session.report("done")
    return TrainResult(
        model_dir=out_dir,
        metrics=metrics,
        applied_updates=ps.version(),
        epochs=epochs,
        resumed=state.resumed,
        train_seconds=state.train_seconds,
        learners=learners,
        ps=stats,
    )


class _Session:
    """One call's supervision: rounds, epoch ends, checkpoint cadence, stop, progress."""

    def __init__(
        self,
        ps: ParameterServer,
        pool: InProcessPool | ProcessPool | StreamPool | GraphPool,
        state: _LoopState,
        hparams: HParams,
        prepared: _Prepared,
        workdir: Path,
        on_progress: Callable[[Progress], None],
        should_stop: Callable[[], bool],
        session_start: float,
    ) -> None:
        self.ps, self.pool, self.state, self.hparams, self.prepared = ps, pool, state, hparams, prepared
        self.workdir, self.should_stop = workdir, should_stop
        self.accounted = session_start
        self.reporter = ProgressReporter(
            on_progress,
            hparams.progress_every_seconds,
            prepared.max_epochs
            * epoch_updates(len(prepared.train_targets), len(state.positions), hparams.batch_size),
            prepared.max_epochs,
            len(state.positions),
        )
        self.plan = SnapshotPlan(
            shard_lengths(len(prepared.train_targets), len(state.positions)),
            hparams.batch_size,
            hparams.average_snapshots,
        )
        self.stop_requested = False
        self.last_checkpoint_time = time.monotonic()
        self.last_checkpoint_version = ps.version()

    def run(self, model: TextClassifier) -> None:
        """Rounds until the plan or early stopping ends training. Raises TrainingStopped, NonFiniteLoss."""
        state = self.state
        self.report("training")
        while not state.finished:
            self.ps.server[C.LR_CUTS] = state.lr_cuts  # learners are parked between rounds
            ends = self.plan.next_ends(state.positions)
            result: RoundResult = self.pool.run_round(state.epoch, state.positions, ends, self._tick)
            state.positions = result.positions
            state.loss_sum += result.loss_sum
            state.loss_count += result.loss_count
            if result.nonfinite is not None:
                raise NonFiniteLoss(self.ps.version() + 1, result.nonfinite)
            if self.hparams.average_snapshots and result.positions == ends:
                state.iterates.add(self.ps.params)
            if all(result.done):
                with state.iterates.mean_in(self.ps.params, keep=lambda: state.finished):
                    _end_epoch(model, state, self.prepared, self.hparams)
            if self.stop_requested or self._checkpoint_due():
                self.save_checkpoint()
            if self.stop_requested:
                raise TrainingStopped(self.ps.version(), state.last_checkpoint)
            if self.reporter.due():
                self.report("training")

    def _checkpoint_due(self) -> bool:
        return (
            self.ps.version() - self.last_checkpoint_version >= self.hparams.checkpoint_every_updates
            or time.monotonic() - self.last_checkpoint_time >= self.hparams.checkpoint_every_seconds
        )

    def _tick(self) -> bool:
        """Between steps (K = 1) or every ~50 ms (K > 1): true asks the learners to park."""
        if self.should_stop():
            self.stop_requested = True
        if self.reporter.due():
            self.report("training")
        return self.stop_requested or self._checkpoint_due()

    def save_checkpoint(self) -> None:
        """Write a checkpoint of the current (quiescent) state."""
        now = time.monotonic()
        state = self.state
        state.train_seconds += now - self.accounted
        self.accounted = now
        state.checkpoints += 1
        state.last_checkpoint = str(
            ckpt.save(self.workdir, _checkpoint_state(self.ps, state, self.hparams, self.prepared))
        )
        self.last_checkpoint_time, self.last_checkpoint_version = time.monotonic(), self.ps.version()

    def ps_stats(self) -> dict[str, object]:
        """The server's counters, pushed/applied cumulative across resumes."""
        stats = self.ps.stats().as_dict()
        for key, value in self.state.earlier.items():
            stats[key] = int(stats[key]) + value  # type: ignore[call-overload]
        stats["respawns"] = getattr(self.pool, "respawns", 0)
        return stats

    def report(self, phase: str) -> None:
        state = self.state
        losses = self.pool.losses
        running = losses[losses[:, 1] > 0]
        loss_sum = state.loss_sum + float(running[:, 0].sum())
        loss_count = state.loss_count + int(running[:, 1].sum())
        self.reporter.samples = int(self.ps.counters.array[1:, C.SAMPLES].sum())
        self.reporter.report(
            phase,
            epoch=state.epoch - 1 if state.finished else state.epoch,
            step=self.ps.version(),
            loss=loss_sum / loss_count if loss_count else state.last_epoch_loss,
            validation_accuracy=state.validation_accuracy,
            checkpoints=state.checkpoints,
            resumed=state.resumed,
            ps=self.ps_stats(),
        )


def _held_out(model: TextClassifier, prepared: _Prepared) -> tuple[np.ndarray, np.ndarray, str]:
    """Logits and targets of the validation split, or of the training data when there is none."""
    if prepared.validation_bags is not None and prepared.validation_targets is not None:
        bags, targets, evaluated_on = prepared.validation_bags, prepared.validation_targets, "validation"
    else:
        bags, targets, evaluated_on = prepared.train_bags, prepared.train_targets, "training"
    return _logits(model, bags).numpy(), targets, evaluated_on


_FoldLogits = tuple[np.ndarray, np.ndarray | None, np.ndarray | None]


def _start_folds(
    data: TrainingData, labels: list[str], hparams: HParams, vectors: SentenceVectors | None
) -> FoldRuns[_FoldLogits]:
    """Start training the fold models of _cross_fit, one process per core at most (trainer.folds).

    Each of ``cross_fit_folds`` stratified folds is scored by a model trained exactly like
    the final one (same hparams, same fixed update budget) on the other folds, with K = 1
    and without checkpoints: about five times the final model's training work, which on
    data this small is seconds (the budget is fixed, so the time is bounded too), spread
    over the node's cores.
    """
    folds = stratified_folds(data.strata, hparams.cross_fit_folds, hparams.seed)
    quiet = HParams.from_dict(
        {**hparams.as_dict(), "checkpoint_every_updates": 1 << 62, "checkpoint_every_seconds": math.inf}
    )
    run = partial(_fold_logits, data, folds, labels, quiet, vectors)
    return FoldRuns(run, hparams.cross_fit_folds, default_learners())


def _fold_logits(
    data: TrainingData,
    folds: np.ndarray,
    labels: list[str],
    hparams: HParams,
    vectors: SentenceVectors | None,
    fold: int,
) -> _FoldLogits:
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
        _train(
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


def _cross_fit(
    data: TrainingData, labels: list[str], folds: FoldRuns[_FoldLogits], should_stop: Callable[[], bool]
) -> tuple[np.ndarray, np.ndarray, str]:
    """Out-of-fold logits of every example, for data too small to hold a validation split out,
    from the fold models that _start_folds started.

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
    return logits, _targets(data, labels), "cross-validation"


def _final_metrics(
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


def _multilabel_metrics(
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
