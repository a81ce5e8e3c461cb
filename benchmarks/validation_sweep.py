"""Compare trainer variants on validation folds carved from train.csv, never test.csv.

    python benchmarks/validation_sweep.py DATASET_DIR... [--folds F] [--repeats R]
        [--per-repeat N] [--max-rows M] [--set KEY=VALUE...] [--variant NAME:KEY=VALUE[,...]...]
        [--encoder]

For each folder, only its ``train.csv`` is read (subsampled, stratified, to ``--max-rows``
when given). Each repeat deals the rows into ``--folds`` stratified folds with its own seed;
each of the first ``--per-repeat`` folds in turn is the validation set and the other folds
the training data. On every such split, side by side: ``taas`` (trainer.train, K = 1, with
DEFAULT_HPARAMS and the ``--set`` overrides), each ``--variant`` (the same plus its own
HParams overrides, e.g. ``--variant updates6k:min_updates=6000``) and
benchmarks/accuracy.py's ``tfidf-logreg`` and ``tfidf-svm``. With ``--encoder``, every taas
system trains on the shared sentence encoder (as English classifiers do; each folder's texts
encoded once) and the frozen-encoder peers ``minilm-logreg`` and ``minilm+tfidf-svm`` join
(benchmarks/linear_peers.py). ``--set cross_fit_folds=0`` skips
cross-fitting (six times cheaper on small data; predictions are the same, but the
temperature stays 1, so ECE is then uncalibrated).

Prints one JSON line per dataset and system: accuracy mean and sd over the splits, pooled
accuracy and correct count over every validation row, pooled top-1 ECE (15 bins; null for
the SVM), ``train_s`` (a split's seconds to train and score the validation rows, mean; the
encoder's encoding of the folder's texts, done once, not in it), and for every system but taas
the paired count of validation rows it gets right and taas wrong (``wins``) and the reverse
(``losses``): with one validation set per split shared by all systems, wins against losses is
the comparison with the most power.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from trainer import DEFAULT_HPARAMS, HParams, LabelledData, LoadedModel, read_labelled_csv, train
from trainer.data import stratified_folds, stratified_split
from trainer.encoder import SentenceEncoder, shared_encoder
from trainer.encoder.registry import MINILM
from trainer.evaluate import expected_calibration_error
from trainer.sentence_features import SentenceVectors, encode_texts

sys.path.insert(0, str(Path(__file__).parent))
from accuracy import dataset_name  # noqa: E402  (the sibling benchmark scripts)
from linear_peers import (  # noqa: E402
    MINILM_PEERS,
    fit_peer,
    tfidf_pipeline,  # noqa: E402
)

PEERS = ("tfidf-logreg", "tfidf-svm")
Score = tuple[np.ndarray, np.ndarray | None]  # correct per validation row, top-1 confidence


def subset(data: LabelledData, indices: np.ndarray) -> LabelledData:
    """The rows ``indices`` of ``data``."""
    return LabelledData([data.texts[i] for i in indices], [data.labels[i] for i in indices])


def hparams_overrides(text: str) -> dict[str, object]:
    """'key=value,key=value' as HParams overrides, the values parsed as JSON (numbers, true)."""
    pairs = (item.split("=", 1) for item in text.split(",") if item)
    return {key: json.loads(value) for key, value in pairs}


def trained_model(hparams: HParams, train_data: LabelledData, vectors: SentenceVectors | None) -> LoadedModel:
    """A taas model trained (K = 1) on ``train_data``, on the sentence encoder's ``vectors`` of
    its texts if given, loaded (its files gone)."""
    with tempfile.TemporaryDirectory(prefix="taas-sweep-") as tmp:
        train(
            train_data,
            workdir=Path(tmp) / "w",
            out_dir=Path(tmp) / "m",
            hparams=hparams,
            learners=1,
            vectors=vectors,
        )
        return LoadedModel.load(Path(tmp) / "m")


def taas_probabilities(
    hparams: HParams,
    train_data: LabelledData,
    validation: LabelledData,
    vectors: SentenceVectors | None = None,
) -> tuple[list[str], np.ndarray]:
    """The labels of a taas model trained (K = 1) on ``train_data``, on the sentence encoder's
    ``vectors`` of its texts if given, and its probabilities (validation rows x labels) for
    the validation texts."""
    model = trained_model(hparams, train_data, vectors)
    embeddings = None if vectors is None else vectors.of(validation.texts)
    return model.labels, model.probabilities(validation.texts, embeddings)


def score(labels: list[str], probabilities: np.ndarray, validation: LabelledData) -> Score:
    """Per validation row: whether the most probable label is right, and its probability."""
    predicted = np.asarray(labels)[probabilities.argmax(axis=1)]
    return predicted == np.asarray(validation.labels), probabilities.max(axis=1)


def _taas(
    hparams: HParams, train_data: LabelledData, validation: LabelledData, vectors: SentenceVectors | None
) -> Score:
    return score(*taas_probabilities(hparams, train_data, validation, vectors), validation)


def _peer(system: str, train_data: LabelledData, validation: LabelledData) -> Score:
    pipeline = tfidf_pipeline(system).fit(train_data.texts, train_data.labels)
    predicted = np.asarray(pipeline.predict(validation.texts))
    confidence = pipeline.predict_proba(validation.texts).max(axis=1) if system == "tfidf-logreg" else None
    return predicted == np.asarray(validation.labels), confidence


def _minilm_peer(
    system: str, train_data: LabelledData, validation: LabelledData, vectors: SentenceVectors
) -> Score:
    predicted = fit_peer(system, train_data, vectors.of(train_data.texts)).predict(
        validation.texts, vectors.of(validation.texts)
    )
    return np.asarray(predicted) == np.asarray(validation.labels), None


def read_train(folder: Path, max_rows: int | None = None) -> LabelledData:
    """The folder's train.csv, subsampled (stratified) to ``max_rows`` when given."""
    data = read_labelled_csv(folder / "train.csv")
    if max_rows is not None and len(data) > max_rows:
        _, keep = stratified_split(data.labels, max_rows / len(data), seed=0)
        data = subset(data, keep)
    return data


def splits(
    labels: list[str], folds: int, repeats: int, per_repeat: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(training rows, validation rows) of each split: per repeat, a stratified deal into
    ``folds`` folds with the repeat's own seed, its first ``per_repeat`` folds in turn held out."""
    for repeat in range(repeats):
        fold_of = stratified_folds(labels, folds, seed=1000 + repeat)
        for fold in range(min(folds, per_repeat)):
            yield np.flatnonzero(fold_of != fold), np.flatnonzero(fold_of == fold)


def summarise(
    dataset: str, rows: int, runs: dict[str, list[Score]], seconds: dict[str, list[float]] | None = None
) -> list[dict[str, object]]:
    """One summary row per system of ``runs`` (its scores per split, the same splits for
    all), paired against the system ``taas``; with ``seconds`` (each split's, per system),
    their mean."""
    summary = []
    base = np.concatenate([c for c, _ in runs["taas"]])
    for system, scored in runs.items():
        correct = np.concatenate([c for c, _ in scored])
        accuracies = [float(c.mean()) for c, _ in scored]
        row: dict[str, object] = {
            "dataset": dataset,
            "system": system,
            "rows": rows,
            "splits": len(scored),
            "accuracy_mean": round(float(np.mean(accuracies)), 4),
            "accuracy_sd": round(float(np.std(accuracies, ddof=1)) if len(scored) > 1 else 0.0, 4),
            "pooled_accuracy": round(float(correct.mean()), 4),
            "correct": int(correct.sum()),
            "validation_rows": len(correct),
            "ece": pooled_ece(scored, correct),
        }
        if seconds is not None:
            row["train_s"] = round(float(np.mean(seconds[system])), 2)
        if system != "taas":
            row["wins"], row["losses"] = paired(correct, base)
        summary.append(row)
    return summary


def pooled_ece(scored: list[Score], correct: np.ndarray) -> float | None:
    """Top-1 ECE over every split's rows (``correct``: theirs, concatenated); None for a
    system without probabilities."""
    if scored[0][1] is None:
        return None
    confidence = np.concatenate([p for _, p in scored if p is not None])
    return round(expected_calibration_error(confidence.tolist(), correct.tolist()), 4)


def paired(correct: np.ndarray, base: np.ndarray) -> tuple[int, int]:
    """(rows right here and wrong in ``base``, rows wrong here and right in ``base``)."""
    return int((correct & ~base).sum()), int((base & ~correct).sum())


def sweep(
    folder: Path,
    systems: dict[str, HParams],
    folds: int,
    repeats: int,
    per_repeat: int,
    max_rows: int | None,
    encoder: SentenceEncoder | None = None,
) -> list[dict[str, object]]:
    """One summary row per system for the folder's train.csv (on ``encoder``, see the module
    docstring)."""
    data = read_train(folder, max_rows)
    vectors = encode_texts(encoder, data.texts) if encoder is not None else None
    # the peers read the encoder's own sentence embedding (its last layer)
    peer_vectors = (
        encode_texts(encoder, data.texts, layers=(encoder.layers,)) if encoder is not None else None
    )
    peers = [*PEERS, *(MINILM_PEERS if encoder is not None else ())]
    runs: dict[str, list[Score]] = {system: [] for system in [*systems, *peers]}
    seconds: dict[str, list[float]] = {system: [] for system in runs}

    def timed(system: str, scored: Callable[..., Score], *args: object) -> None:
        started = time.perf_counter()
        runs[system].append(scored(*args))
        seconds[system].append(time.perf_counter() - started)

    for train_rows, validation_rows in splits(data.labels, folds, repeats, per_repeat):
        train_data, validation = subset(data, train_rows), subset(data, validation_rows)
        for system, hparams in systems.items():
            timed(system, _taas, hparams, train_data, validation, vectors)
        for system in PEERS:
            timed(system, _peer, system, train_data, validation)
        if peer_vectors is not None:
            for system in MINILM_PEERS:
                timed(system, _minilm_peer, system, train_data, validation, peer_vectors)
    return summarise(dataset_name(folder), len(data), runs, seconds)


def split_parser(description: str) -> argparse.ArgumentParser:
    """A parser of the dataset folders and the arguments of ``splits``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("datasets", nargs="+", type=Path, help="folders holding train.csv")
    parser.add_argument("--folds", type=int, default=5, help="stratified folds per repeat")
    parser.add_argument("--repeats", type=int, default=1, help="repeats, each with its own fold seed")
    parser.add_argument("--per-repeat", type=int, default=5, help="folds of each repeat used as validation")
    return parser


def sweep_parser(description: str) -> argparse.ArgumentParser:
    """split_parser's, plus a subsample of the rows and the taas systems (taas_systems)."""
    parser = split_parser(description)
    parser.add_argument("--max-rows", type=int, default=None, help="stratified subsample of train.csv")
    parser.add_argument("--set", default="", help="KEY=VALUE[,...]: HParams overrides for every taas run")
    parser.add_argument("--encoder", action="store_true", help="taas on the sentence encoder, and its peers")
    parser.add_argument(
        "--variant", action="append", default=[], help="NAME:KEY=VALUE[,...]: a taas variant (repeatable)"
    )
    return parser


def taas_systems(args: argparse.Namespace) -> dict[str, HParams]:
    """``taas`` (DEFAULT_HPARAMS with ``--set``) and each ``--variant``, by name."""
    base = dataclasses.replace(DEFAULT_HPARAMS, **hparams_overrides(args.set))  # type: ignore[arg-type]
    systems = {"taas": base}
    for variant in args.variant:
        name, _, overrides = variant.partition(":")
        systems[name] = dataclasses.replace(base, **hparams_overrides(overrides))  # type: ignore[arg-type]
    return systems


def main() -> None:
    args = sweep_parser(__doc__.splitlines()[0]).parse_args()
    systems = taas_systems(args)
    encoder = shared_encoder(MINILM.name) if args.encoder else None
    for folder in args.datasets:
        rows = sweep(folder, systems, args.folds, args.repeats, args.per_repeat, args.max_rows, encoder)
        for row in rows:
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
