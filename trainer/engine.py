"""train(): K learners around the embedded parameter server, with checkpoints, resume, stop.

The supervisor (trainer.session, in the caller's process) owns the epoch plan: every epoch's
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

This module is the entry, and puts one training session together (``_train``): the data
prepared (trainer.preparation), the server and its learners started, the rounds supervised
(trainer.session) with the loop's state checkpointed (trainer.loop_state), and the finished
model scored on held-out rows (trainer.held_out) and saved.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainer import checkpoint as ckpt
from trainer.data import LabelledData, check_negatives, check_trainable
from trainer.encoder import SentenceEncoder
from trainer.errors import (
    CheckpointCorrupt,
    InvalidTrainingData,
    NonFiniteLoss,
    TrainerError,
    TrainingStopped,
    WeightsOutOfBounds,
)
from trainer.folds import FoldRuns
from trainer.held_out import (
    FoldLogits,
    cross_fit_logits,
    final_metrics,
    held_out_fold_logits,
    held_out_logits,
    in_scope_scoring,
    multilabel_metrics,
    start_folds,
    start_held_out,
)
from trainer.hparams import DEFAULT_HPARAMS, HParams
from trainer.inference import save_model
from trainer.learner_count import auto_learners
from trainer.loop_state import LoopState, restore_state
from trainer.preparation import (
    TrainingData,
    data_fingerprint,
    initial_model,
    prepare,
    refit_split,
    sentence_vectors,
    validation_split,
)
from trainer.progress import Progress, ProgressReporter
from trainer.ps.cuda import StreamPool, cuda_learners
from trainer.ps.graph import GraphPool
from trainer.ps.learner import ShardData
from trainer.ps.optimizer import OptimizerConfig
from trainer.ps.pool import InProcessPool, ProcessPool, SuspectState, forgetting_freed_storages
from trainer.ps.server import ParameterServer
from trainer.ps.stripes import default_stripes
from trainer.sentence_features import SentenceVectors, describe_model
from trainer.session import Session
from trainer.step import TextClassifierTask, model_parameters

log = logging.getLogger(__name__)

MAX_RESTARTS = 2  # sessions restarted from the last checkpoint after a suspect state, per call
# a training that diverges starts over at half the learning rate, at most this many times a call
# (down to 1/8 of it): plain SGD at the fixed rate diverged on multi-label data whose texts
# carry many labels each (docs/model.md, "Multi-label")
MAX_DIVERGENCE_RETRIES = 3


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
    fewer than two classes, or out-of-scope examples in multi-label data or beside one class),
    NonFiniteLoss or WeightsOutOfBounds (it diverged at every rate),
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
    check_negatives(data, multi_label)
    if vectors is None and encoder is not None:
        vectors = sentence_vectors(encoder, data, Path(workdir), hparams, learners, on_progress, should_stop)
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
    """One training session (see train); ``cross_fit`` False trains a fold model (trainer.held_out);
    ``vectors``: the sentence embeddings of every text of ``data`` (None: n-grams only)."""
    check_trainable(data)
    on_cuda = device.type == "cuda"
    session_start = time.monotonic()
    fingerprint = data_fingerprint(data, vectors)
    saved = ckpt.load_latest(workdir)
    if saved is not None and "kind" not in saved[ckpt.OPTIMIZER]:
        saved = None  # written by the single-learner loop before the parameter server: start over
    if saved is not None:
        if saved[ckpt.DATA]["fingerprint"] != fingerprint:
            raise TrainerError(f"{workdir} holds a checkpoint of different training data")
        hparams = HParams.from_dict(saved[ckpt.HPARAMS])
        learners = len(saved[ckpt.CURSORS])  # the cursors are per learner: resume with the same K

    split, held = refit_split(validation_split(data, hparams), hparams, vectors)
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
    folds: FoldRuns[FoldLogits] | None = None
    try:
        early = ProgressReporter(on_progress, hparams.progress_every_seconds, 0, 1, learners)
        early.report("preparing", epoch=1, step=0, loss=None, checkpoints=0, resumed=0)
        prepared = prepare(data, hparams, fingerprint, split, vectors)
        # no n-gram at all (the featurizer has already read every training text) and no sentence
        # embedding; the whole data only: a fold of a few rows may hold none with a word, and
        # trains to uniform scores
        if cross_fit and prepared.rows == 0:
            raise InvalidTrainingData(0, "no text has a letter or a digit: there is nothing to learn from")
        # one example (a multi-label text) leaves its fold model nothing to learn from
        cross_fitting = (
            cross_fit and prepared.validation_bags is None and hparams.cross_fit_folds > 1 and len(data) > 1
        )
        if cross_fit and len(held):  # the held-out model trains beside this one
            folds = start_held_out(data, held, prepared.labels, hparams, vectors, _train)
        elif cross_fitting:  # the fold models train beside the final one (trainer.folds)
            folds = start_folds(data, prepared.labels, hparams, vectors, _train)
        model = initial_model(prepared, hparams)
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
            LoopState(epoch=1, seed=hparams.seed, positions=[0] * learners)
            if saved is None
            else restore_state(saved, ps)
        )
        del saved
        data_tensors = ShardData.of(prepared.train_bags, prepared.train_targets, shared=processes is not None)
        task = partial(
            TextClassifierTask,
            unique_rows=optimizer.needs_unique_rows,
            multi_label=prepared.multi_label,
            class_weights=prepared.class_weights,
            direct_scale=model.config.direct_scale,
            sentence_width=0 if prepared.sentence is None else prepared.sentence.dim,
        )
        if processes is not None:
            processes.start(ps, task(), data_tensors, hparams.batch_size, state.seed)
        elif on_cuda and learners == 1 and optimizer.kind == "sgd":
            pool = GraphPool(
                ps,
                data_tensors,
                hparams.batch_size,
                state.seed,
                device,
                class_weights=prepared.class_weights,
                direct_scale=model.config.direct_scale,
            )
        elif on_cuda:
            pool = StreamPool(ps, task, data_tensors, hparams.batch_size, state.seed, device)
        else:
            pool = InProcessPool(ps, task(), data_tensors, hparams.batch_size, state.seed)
        assert pool is not None
        session = Session(
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
                held_out_fold_logits(data, prepared.labels, folds, should_stop)
                if folds is not None and len(held)
                else cross_fit_logits(data, prepared.labels, folds, should_stop)
                if folds is not None
                else held_out_logits(model, prepared)
            )
            # the rows of ``logits``: the held-out model's, every row (cross-fitting), or the
            # validation split's (held_out_logits' "training" ones get no in-scope scoring)
            held_rows = held if len(held) else np.arange(len(data)) if folds is not None else split[1]
        except TrainingStopped:
            raise TrainingStopped(ps.version(), state.last_checkpoint) from None
    finally:
        if pool is not None:
            pool.close()
        if folds is not None:
            folds.close()
    metrics, temperature, threshold = (
        multilabel_metrics(logits, targets, prepared.labels, evaluated_on)
        if prepared.multi_label
        else final_metrics(logits, targets, prepared.labels, evaluated_on)
    )
    metrics["model"] = describe_model(prepared.sentence)
    in_scope = (
        in_scope_scoring(data, prepared.labels, held_rows, logits, temperature, hparams, vectors)
        if cross_fit and isinstance(data, LabelledData) and evaluated_on != "training"  # single-label
        else None
    )
    if in_scope is not None:  # what the version's out-of-scope decision is, beside its metrics
        metrics["out_of_scope"] = {"rate": in_scope.rate, "neighbour_weight": in_scope.neighbour_weight}
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
        in_scope=in_scope,
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
