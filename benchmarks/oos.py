"""Out-of-scope detection: how well each system tells apart texts of none of its classes.

    python benchmarks/oos.py DATASET_DIR... [--json] [--repeats R] [--rate F] [--language L]
        [--set KEY=VALUE[,...]] [--systems NAME,...] [--validation]

A folder with an ``oos_test.csv`` (label ``oos``, as the hint3 folders have): the systems
train on ``train.csv`` and score ``test.csv`` and ``oos_test.csv`` together. A folder without
one is scored by leaving classes out: per repeat (seeded, ``--repeats``, default 5) a random
quarter of train.csv's classes is unseen; the systems train on the other classes' rows and
score test.csv, whose rows of the unseen classes are the out-of-scope ones. ``--validation``
reads train.csv alone, for choices made on validation folds: a stratified fifth of it (seeded)
is the scored file, the rest the training rows, classes left out as above.

Systems, each a score per text and a reject threshold:

* ``taas``: the in-scope score a classifier answers with (trainer.in_scope), at the rate its
  threshold is set to (``--rate``; a classifier's default is 2 %), set at training on its own
  held-out rows: no validation fifth, the model trains once on every training row;
* ``taas-confidence``: taas's calibrated top-class confidence (trainer.train as a classifier
  trains, on the sentence encoder for English; ``--set``: HParams overrides);
* ``tfidf-logreg-msp``: the maximum softmax probability of the TF-IDF logistic regression
  (benchmarks/linear_peers.py).

Each peer's threshold rejects ``--rate`` (default 0.02) of the in-scope rows of a validation
fifth of the training rows (stratified), scored by the system trained on the other four fifths;
the system then trains on every training row and keeps that threshold.

One row per dataset and system: ``auroc`` (in-scope against out-of-scope by the confidence,
no threshold), and at the threshold ``mcc`` (HINT3's: scikit-learn's multi-class MCC with a
rejected text labelled ``oos``), ``oos_recall``, ``oos_precision``, ``in_scope_accuracy``
(in-scope rows given their class and not rejected), ``in_scope_accuracy_lost`` (against no
threshold), ``in_scope_rejected`` (the share of in-scope rows rejected, right or wrong: what
the rate promises); then ``best_mcc`` at the best threshold in hindsight (what the hint3 SOURCE.md's
published figures are) and the ``threshold``. Leave-classes-out rows are means over repeats.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
from sklearn.metrics import matthews_corrcoef, roc_auc_score

from trainer import DEFAULT_HPARAMS, HParams, LabelledData, read_labelled_csv
from trainer.data import stratified_split
from trainer.encoder import shared_encoder
from trainer.hparams import encoder_for
from trainer.sentence_features import SentenceVectors, encode_texts

sys.path.insert(0, str(Path(__file__).parent))
from accuracy import dataset_name, print_rows  # noqa: E402  (the sibling benchmark scripts)
from linear_peers import tfidf_pipeline  # noqa: E402
from validation_sweep import hparams_overrides, subset, taas_probabilities, trained_model  # noqa: E402

OOS = "oos"  # the label of oos_test.csv's rows, and of a rejected text
# (labels, probabilities per scored text) of a system trained on the first data
Scorer = Callable[[LabelledData, list[str]], tuple[list[str], np.ndarray]]


@dataclasses.dataclass(frozen=True)
class Case:
    """One scoring: the training rows, and the scored texts with their truth (OOS: unseen)."""

    train: LabelledData
    scored: LabelledData


def cases(folder: Path, repeats: int, validation: bool = False) -> list[Case]:
    """The folder's scoring cases: one with its oos_test.csv, else one per left-out repeat
    (``validation``: of train.csv's fifths, see the module docstring)."""
    train = read_labelled_csv(folder / "train.csv")
    if validation:
        fit_rows, validation_rows = stratified_split(train.labels, 0.2, seed=1)
        train, test = subset(train, fit_rows), subset(train, validation_rows)
    else:
        test = read_labelled_csv(folder / "test.csv")
    if (folder / "oos_test.csv").is_file() and not validation:
        oos = read_labelled_csv(folder / "oos_test.csv")
        return [Case(train, LabelledData(test.texts + oos.texts, test.labels + [OOS] * len(oos)))]
    classes = sorted(set(train.labels))
    if len(classes) - max(1, len(classes) // 4) < 2:
        return []  # a class left out would leave one: nothing to classify (nlu-eval-chatbot's two)
    found = []
    for repeat in range(repeats):
        rng = np.random.default_rng(repeat)
        unseen = set(rng.choice(classes, size=max(1, len(classes) // 4), replace=False).tolist())
        seen_rows = np.array([i for i, label in enumerate(train.labels) if label not in unseen])
        truth = [OOS if label in unseen else label for label in test.labels]
        found.append(Case(subset(train, seen_rows), LabelledData(test.texts, truth)))
    return found


def measure(truth: list[str], predicted: list[str], confidence: np.ndarray, threshold: float) -> dict:
    """The row's figures for one scoring (see the module docstring)."""
    truth_a, predicted_a = np.asarray(truth), np.asarray(predicted)
    in_scope = truth_a != OOS
    rejected = confidence < threshold
    decided = np.where(rejected, OOS, predicted_a)
    in_scope_accuracy = float((decided == truth_a)[in_scope].mean())
    return {
        "auroc": float(roc_auc_score(in_scope, confidence)),
        "mcc": float(matthews_corrcoef(truth_a, decided)),
        "oos_recall": float(rejected[~in_scope].mean()),
        "oos_precision": float((~in_scope[rejected]).mean()) if rejected.any() else 0.0,
        "in_scope_accuracy": in_scope_accuracy,
        "in_scope_accuracy_lost": float((predicted_a == truth_a)[in_scope].mean()) - in_scope_accuracy,
        "in_scope_rejected": float(rejected[in_scope].mean()),
        "best_mcc": max(
            float(matthews_corrcoef(truth_a, np.where(confidence < t, OOS, predicted_a)))
            for t in [0.0, *np.unique(confidence)]
        ),
        "threshold": threshold,
    }


def reject_threshold(confidence: np.ndarray, rate: float) -> float:
    """The confidence below which ``rate`` of these in-scope confidences fall."""
    return float(np.quantile(confidence, rate))


def run_system(scorer: Scorer, case: Case, rate: float) -> dict:
    """Threshold from a validation fifth, then train on every row and score the case."""
    fit_rows, validation_rows = stratified_split(case.train.labels, 0.2, seed=0)
    validation = subset(case.train, validation_rows)
    _, probabilities = scorer(subset(case.train, fit_rows), validation.texts)
    threshold = reject_threshold(probabilities.max(axis=1), rate)
    labels, probabilities = scorer(case.train, case.scored.texts)
    predicted = [labels[i] for i in probabilities.argmax(axis=1)]
    return measure(case.scored.labels, predicted, probabilities.max(axis=1), threshold)


def tfidf_logreg(train: LabelledData, texts: list[str]) -> tuple[list[str], np.ndarray]:
    """The TF-IDF logistic regression's labels and probabilities for ``texts``."""
    pipeline = tfidf_pipeline("tfidf-logreg").fit(train.texts, train.labels)
    return [str(label) for label in pipeline.classes_], pipeline.predict_proba(texts)


def taas_scorer(hparams: HParams, vectors: SentenceVectors | None) -> Scorer:
    """taas trained as a classifier is (K = 1), on the encoder's ``vectors`` if given."""

    def scorer(train: LabelledData, texts: list[str]) -> tuple[list[str], np.ndarray]:
        return taas_probabilities(hparams, train, LabelledData(texts, [OOS] * len(texts)), vectors)

    return scorer


def run_taas(hparams: HParams, vectors: SentenceVectors | None, case: Case, rate: float) -> dict:
    """taas as a classifier answers: trained once on every row (K = 1), each scored text's
    in-scope score, rejected below ``rate``."""
    model = trained_model(hparams, case.train, vectors)
    embeddings = None if vectors is None else vectors.of(case.scored.texts)
    probabilities = model.probabilities(case.scored.texts, embeddings)
    ranked = model.rank(probabilities, top=1)
    scores = model.in_scope_scores(probabilities, embeddings)
    assert scores is not None, "a single-label model trained now has an in-scope score"
    return measure(case.scored.labels, [r[0][0] for r in ranked], np.asarray(scores), rate)


SYSTEMS = ("taas", "taas-confidence", "tfidf-logreg-msp")


def benchmark(
    folder: Path,
    repeats: int,
    rate: float,
    language: str,
    hparams: HParams = DEFAULT_HPARAMS,
    systems: tuple[str, ...] = SYSTEMS,
    validation: bool = False,
) -> list[dict[str, object]]:
    """One row per system of ``systems`` for the folder (means over its cases); none, said on
    stderr, for a folder of too few classes to leave one out."""
    found = cases(folder, repeats, validation)
    if not found:
        print(
            f"{folder}: {len(set(read_labelled_csv(folder / 'train.csv').labels))} classes: "
            "too few to leave a quarter out and keep two; skipped",
            file=sys.stderr,
        )
        return []
    spec = encoder_for(language)
    vectors = None
    if spec is not None:
        texts = [t for case in found for t in case.train.texts + case.scored.texts]
        vectors = encode_texts(shared_encoder(spec.name), texts)
    scorers: dict[str, Scorer] = {
        "taas-confidence": taas_scorer(hparams, vectors),
        "tfidf-logreg-msp": tfidf_logreg,
    }
    runs: dict[str, Callable[[Case], dict]] = {
        "taas": lambda case: run_taas(hparams, vectors, case, rate),
        **{system: partial(run_system, scorer, rate=rate) for system, scorer in scorers.items()},
    }
    rows = []
    for system in systems:
        run = runs[system]
        results = [run(case) for case in found]
        row: dict[str, object] = {"dataset": dataset_name(folder), "system": system}
        row.update({key: round(float(np.mean([r[key] for r in results])), 4) for key in results[0]})
        row["cases"] = len(results)
        rows.append(row)
    return rows


def _table(rows: list[dict[str, object]]) -> str:
    keys = ["dataset", "system", "auroc", "mcc", "oos_recall", "in_scope_accuracy_lost", "best_mcc"]
    lines = ["  ".join(f"{key:>22}" for key in keys)]
    lines += ["  ".join(f"{row[key]!s:>22}" for key in keys) for row in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("datasets", nargs="+", type=Path, help="folders holding train.csv and test.csv")
    parser.add_argument("--json", action="store_true", help="one JSON line per dataset and system")
    parser.add_argument("--repeats", type=int, default=5, help="leave-classes-out repeats (default 5)")
    parser.add_argument("--rate", type=float, default=0.02, help="in-scope validation rows rejected")
    parser.add_argument("--language", default="en", help="the classifiers' language (en: on the encoder)")
    parser.add_argument("--set", default="", help="KEY=VALUE[,...]: HParams overrides for taas")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="NAME,...: the systems run")
    parser.add_argument("--validation", action="store_true", help="score a fifth of train.csv, not test.csv")
    args = parser.parse_args()
    hparams = dataclasses.replace(DEFAULT_HPARAMS, **hparams_overrides(args.set))  # type: ignore[arg-type]
    rows = (
        row
        for folder in args.datasets
        for row in benchmark(
            folder,
            args.repeats,
            args.rate,
            args.language,
            hparams,
            tuple(args.systems.split(",")),
            args.validation,
        )
    )
    print_rows(rows, as_json=args.json, table=_table)


if __name__ == "__main__":
    main()
