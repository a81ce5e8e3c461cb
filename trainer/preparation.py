"""Everything a training derives from its data and hyper-parameters before the first update.

The seeded validation split, the featurizer fitted on the training part and the bags of both
parts (the sentence embeddings appended when an encoder joins the n-grams), each example's
target, the class weights of the loss, the epoch plan, the model a training starts from, and
the data's fingerprint, which ties a checkpoint to the data it was trained on. Encoding the
texts with the shared sentence encoder is the phase before all that (``sentence_vectors``).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from trainer.data import LabelledData, MultiLabelData, multilabel_split, stratified_split
from trainer.encoder import SentenceEncoder, encoder_threads
from trainer.errors import TrainingStopped
from trainer.features import Bags, Featurizer, FeaturizerConfig
from trainer.hparams import HParams
from trainer.learner_count import default_learners
from trainer.model import ModelConfig, TextClassifier
from trainer.progress import Progress, ProgressReporter
from trainer.sentence_features import SentenceInput, SentenceVectors, encode_texts

TrainingData = LabelledData | MultiLabelData  # single-label rows, or multi-label examples


@dataclass(frozen=True)
class Prepared:
    """Everything derived from the data and the hparams before the first update."""

    labels: list[str]
    multi_label: bool
    featurizer: Featurizer
    sentence: SentenceInput | None  # how the encoder's embedding enters the bags (None: n-grams only)
    train_bags: Bags
    train_targets: np.ndarray  # class ids, or multi-hot rows (see example_targets)
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


def data_fingerprint(data: TrainingData, vectors: SentenceVectors | None) -> str:
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


def example_targets(data: TrainingData, labels: list[str]) -> np.ndarray:
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


def validation_split(data: TrainingData, hparams: HParams) -> tuple[np.ndarray, np.ndarray]:
    """The seeded (train, validation) rows: stratified by class, or multilabel_split's; every
    row in training and none held out when the validation part would hold fewer than
    ``min_validation_rows`` (see prepare)."""
    if isinstance(data, MultiLabelData):
        train_idx, validation_idx = multilabel_split(
            data.label_sets, hparams.validation_fraction, hparams.seed
        )
    else:
        train_idx, validation_idx = stratified_split(data.labels, hparams.validation_fraction, hparams.seed)
    if len(validation_idx) < hparams.min_validation_rows:
        return np.arange(len(data), dtype=np.int64), np.zeros(0, dtype=np.int64)
    return train_idx, validation_idx


def refit_split(
    split: tuple[np.ndarray, np.ndarray], hparams: HParams, vectors: SentenceVectors | None
) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
    """(the split a model trains on, the rows a held-out model leaves out): a model on a
    sentence encoder with a validation split (``refit_every_row``) trains on every row, and
    the validation rows are left to one more model trained without them
    (trainer.held_out.start_held_out); otherwise ``split`` itself, and no such rows."""
    train_idx, validation_idx = split
    if vectors is None or not hparams.refit_every_row or not len(validation_idx):
        return split, validation_idx[:0]
    return (np.sort(np.concatenate([train_idx, validation_idx])), validation_idx[:0]), validation_idx


def prepare(
    data: TrainingData,
    hparams: HParams,
    fingerprint: str,
    split: tuple[np.ndarray, np.ndarray],
    vectors: SentenceVectors | None,
) -> Prepared:
    """Fit the featurizer on the training part of ``split`` (validation_split's) and plan the epochs.

    Validation split: a seeded stratified ``validation_fraction`` (classes with fewer than
    3 examples stay whole in training; multi-label data: see multilabel_split). When it
    would hold fewer than
    ``min_validation_rows`` examples, there is no split: on a few dozen examples a
    validation set of a handful of rows measures noise (one example is several points of
    accuracy), early stopping on it stops at random, and holding those rows out costs the
    model a large share of what it could learn. Then the model trains on all the data for
    a fixed number of updates instead (a linear model over normalised TF-IDF features
    does not overfit badly with more updates, so the fixed budget errs on the long side),
    and its held-out scores come from cross-fitting (trainer.held_out).
    """
    labels = data.classes
    targets = example_targets(data, labels)
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
    return Prepared(
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


def initial_model(prepared: Prepared, hparams: HParams) -> TextClassifier:
    """The model a training starts from, seeded (a checkpoint, if any, is restored over it).

    The biases start at zero, except a multi-label model's of more than
    ``hparams.multi_label_prior_classes`` classes: those start at each class's log-odds in the
    training rows, where a logistic regression with no evidence would put them. At zero every
    sigmoid starts at 0.5, and a text's first steps move its logits by the sum of all C class
    codes, whose cross-talk grows as the square root of C: plain SGD at the fixed rate diverged
    from 300 classes (docs/model.md). From the prior a class a text lacks pushes by its share.
    Reuters' 95 classes train better from zero (the prior stops early stopping sooner).
    """
    direct = prepared.sentence.dim if prepared.sentence is not None and hparams.encoder_direct_scale else 0
    model = TextClassifier(
        ModelConfig(
            rows=prepared.rows,
            dim=hparams.embedding_dim,
            classes=len(prepared.labels),
            direct=direct,
            # the bags hold the embedding times encoder_scale
            direct_scale=hparams.encoder_direct_scale / hparams.encoder_scale if direct else 0.0,
        ),
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


def sentence_vectors(
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
