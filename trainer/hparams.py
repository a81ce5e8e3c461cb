"""The one installation-wide hyper-parameter set. Tenants never change it; operators may.

The values were chosen on validation splits carved from the training files of the shared
benchmark datasets (never on their test files) and are used unchanged for every dataset:
what adapts to the data is only derived from its size (how many epochs give at least
``min_updates`` updates, whether a validation split is large enough to early-stop on).
Adam's learning rate was first picked on the validation splits of the two 13k-row sets (0.01
peaked lower and overfit sooner than 0.003), ``min_updates`` by 5-fold cross-validation on
the training files of the three tiny sets. A later one-change-at-a-time sweep on the same
held-out data (docs/model.md) found no candidate better by more than one held-out example
on any set, which is within run-to-run noise, so the set did not change. Repeated
validation folds (benchmarks/validation_sweep.py) then chose one change: halving the
learning rate after each epoch that does not improve the validation score (4 paired wins,
1 loss on the 13k-row sets; the same Reuters model), and later a second: plain SGD at lr
1.0 (of 0.1-3.0) instead of Adam at 0.003 (44 paired wins, 28 losses over the five sets,
none lost on the tiny ones, a point of validation micro-F1 on Reuters), and a third: a zero
embedding and unit-scale output codes as the starting point instead of both in ±1/64: 15
fewer of the 13k-row sets' 26,868 validation rows (40 paired wins, 55 losses: sign test p =
0.15), the tiny sets' predictions unchanged, 1.9 points of validation micro-F1 on Reuters,
and data of 3,000 classes with 6 rows each learned instead of not at all
(benchmarks/many_classes.py), and a fourth: a class-balanced loss, which took the recall
of a class cut to ten training rows from 0.36 to 0.71 on snips' held-out rows and from 0.33
to 0.71 on goo2018's (benchmarks/imbalance.py) and changed the balanced sets' validation
predictions by 3 rows, all wins, and a fifth: each epoch's model the mean of eight snapshots
of its parameters, not its last iterate (80 paired wins, 50 losses on the 13k-row sets'
validation folds of two deals, sign test p = 0.01; the tiny sets' predictions unchanged),
and for the encoder's model a sixth: every row and the whole plan instead of early stopping on
a validation split, which a second model then scores (``refit_every_row``: 72 paired wins,
40 losses on the validation folds of acid and trec50, where no width, scale or class weight
had moved acid), and a seventh: the embedding also through a full-rank direct path to the
classes (``encoder_direct_scale``: 49 paired wins, 24 losses over acid, trec50, snips and the
small sets' validation folds, none worse).
docs/model.md has the tables, with what lost: weight decay
(under Adam and under SGD), a refit on every row (of the n-gram model: level), a linear decay
over a short plan (better on the intent sets, 2.4 points worse on Reuters' validation split),
label smoothing, n-gram
dropout, iterate averaging under Adam, seed ensembles, a non-linear hidden layer, a frozen sentence
encoder as extra features or in an ensemble (benchmarks/encoder_sweep.py), batches of 8 or
32, a 128-wide embedding, a one-vs-rest loss, and a plain linear model (the output layer a
frozen, scaled identity) instead of the factorisation.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from trainer.encoder.registry import ENCODERS, EncoderSpec


@dataclass(frozen=True)
class HParams:
    """Training hyper-parameters (see the module docstring for how they were chosen)."""

    seed: int = 20240611
    # features (copied into the FeaturizerConfig saved with each model)
    word_ngrams: int = 2
    char_ngram_min: int = 2
    char_ngram_max: int = 5
    buckets: int = 1 << 24
    # 300k rows x (64 float16 + int32 bucket + float32 IDF) = 41 MB: the 50 MB model limit
    max_features: int = 300_000
    # model
    embedding_dim: int = 64
    # an encoder model's sentence embedding (each layer's block L2-normalised) enters each bag
    # times this, and its word and character n-grams' groups (of norm 1 each) times the next,
    # in place of 1 (trainer.sentence_features). Halving both quarters the step SGD takes on
    # every weight at the fixed learning rate: with the embedding beside them, the n-gram rows
    # memorised the training rows within four epochs at full scale (training loss 0.005) and
    # the embedding's rows stopped learning (docs/experiments/encoder.md)
    encoder_scale: float = 0.5
    encoder_ngram_scale: float = 0.5
    # and the embedding, times this, also reaches the classes through a full-rank linear map
    # beside the 64-wide hidden layer (trainer.model, ``direct``; 0: none). On acid's five
    # validation folds (175 classes) that was 33 rows of 11,130 more, on every fold, level on
    # trec50 and the hint3 sets; at 4 it cost trec50 35 rows (docs/experiments/encoder.md)
    encoder_direct_scale: float = 2.0
    # initial weights, uniform in ±bound (0: zeros). The embedding starts at zero, so a row
    # holds exactly the steps its n-gram's evidence gave it (an n-gram seen once carries no
    # random start into serving), and the output layer starts as random class codes of unit
    # scale, which the rows move toward from the first step. Both at ±1/64, the old start,
    # was a saddle a thousand classes of ten rows each did not leave (docs/model.md)
    embedding_init: float = 0.0
    output_init: float = 1.0
    # a multi-label model of more classes than this starts its biases at the classes' log-odds
    # in the training rows, not at zero: from zero, SGD at the fixed rate diverged from 300
    # classes, while Reuters' 95 train better from zero (docs/model.md, "Multi-label")
    multi_label_prior_classes: int = 128
    # optimisation: plain SGD ("sgd"; "adam": Adam, lazy on the embedding rows), small batches.
    # SGD's step is proportional to the gradient, so a rare n-gram's row moves only as far as
    # its evidence takes it: the geometry of the peers' L2-regularised linear models. Adam
    # gives every touched row a full-size step, which fits rare n-grams (docs/model.md)
    optimizer: str = "sgd"
    batch_size: int = 16
    # single-label loss: each example weighs (rows / (classes x its class's rows)) ** this,
    # the weights counted on the training rows (0: every example alike; 1: every class alike,
    # scikit-learn's class_weight="balanced"). A mini-batch's loss is its weighted mean, so a
    # rare class's example takes at most a whole batch's step. Tenants' data is rarely
    # balanced: a new class with ten rows beside classes of hundreds was found a third of
    # the time unweighted, 71% of it balanced (benchmarks/imbalance.py). Multi-label data
    # is not weighted
    class_balance: float = 1.0
    learning_rate: float = 1.0
    # with a validation split, each epoch that improves neither its best score nor its lowest
    # loss multiplies the learning rate by this (reduce on plateau; 1.0: constant), so the
    # last updates settle; ``patience`` such epochs in a row stop training
    lr_plateau_factor: float = 0.5
    # parameter server: no gradient is applied more than this many updates after the version
    # it was computed against; learners wait for slower ones to keep it (None: no bound; with
    # K equally fast learners, a bound under 2K - 2 makes them wait even so). Either way a
    # gradient staler than K - 1 takes learning_rate x (K - 1) / staleness (staleness_scale)
    staleness_bound: int | None = None
    # an epoch's model (validated, kept, saved) is the mean of its parameters at this many
    # evenly spaced points of the epoch, the last at its end; training goes on from the last
    # iterate (trainer.averaging; 0: the last iterate). Under SGD at a fixed rate the last
    # iterate carries its last steps' noise
    average_snapshots: int = 8
    # schedule and early stopping
    min_updates: int = 3000
    max_epochs: int = 20
    patience: int = 3
    validation_fraction: float = 0.1
    min_validation_rows: int = 100
    # a model on a sentence encoder trains on every row for the fixed plan (max_epochs at the
    # constant rate, no early stopping), and its held-out scores (metrics, temperature) come
    # from one more model trained the same way without the validation split's rows, beside
    # it. On acid's validation folds that was 4,176 rows against early stopping's 4,159 (42
    # paired wins, 25 losses; the SVM peer 4,177): the split's tenth of the rows, and the
    # epochs early stopping cut, are what the embedding needs (docs/experiments/encoder.md)
    refit_every_row: bool = True
    # below min_validation_rows, held-out scores (metrics, temperature) come from k-fold
    # cross-fitting: k extra models, each trained like the final one on the other folds
    # (0 or 1: off, metrics on the training rows and no calibration)
    cross_fit_folds: int = 5
    # out-of-scope detection (trainer.in_scope): a single-label classifier rejects a text that
    # scores below this share of its held-out in-scope rows, and its score weighs the cosine
    # to the nearest training text's sentence embedding by this beside the confidence (half
    # weight: on validation folds it helped the chatbot sets at any weight and, at full
    # weight, cost trec50 0.012 AUROC; docs/experiments/out-of-scope.md)
    in_scope_rate: float = 0.02
    in_scope_neighbour_weight: float = 0.5
    # operations
    checkpoint_every_updates: int = 5000
    checkpoint_every_seconds: float = 60.0
    progress_every_seconds: float = 1.0

    def as_dict(self) -> dict[str, object]:
        """JSON-safe dict of every field."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, object]) -> HParams:
        """Rebuild from as_dict() output; unknown keys are ignored, missing ones take defaults."""
        known = {f.name for f in fields(cls)}
        # sets saved before these fields were trained with Adam, from weights in ±1/64,
        # unweighted, from the last iterate, with the validation split held out of every model
        old = {
            "optimizer": "adam",
            "embedding_init": 1 / 64,
            "output_init": 1 / 64,
            "class_balance": 0.0,
            "average_snapshots": 0,
            "refit_every_row": False,
            "encoder_direct_scale": 0.0,
        }
        values = {**old, **values}
        return cls(**{k: v for k, v in values.items() if k in known})  # type: ignore[arg-type]


DEFAULT_HPARAMS = HParams()


def encoder_for(language: str) -> EncoderSpec | None:
    """The pretrained sentence encoder a classifier in ``language`` (an NLC language code)
    trains on, or None: the n-gram model alone. The one rule of the model on the data: where
    an encoder reads the language, its embedding joins the n-grams (docs/model.md measures
    it on every shared dataset's validation folds); where none does, the n-grams are all
    there is, and they work on any script."""
    return next((spec for spec in ENCODERS.values() if language in spec.languages), None)
