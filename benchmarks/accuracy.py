"""Accuracy of taas against TF-IDF peers on labelled-text dataset folders.

    python benchmarks/accuracy.py DATASET_DIR... [--json] [--learners K[,K...]]

Each DATASET_DIR holds train.csv and test.csv (header text,label). For each folder this
trains taas (trainer.train, in-process, DEFAULT_HPARAMS) and two scikit-learn peers on
TF-IDF word 1-2 + char_wb 2-5 grams (sublinear TF): LogisticRegression(C=10,
max_iter=2000) and LinearSVC(C=1); then evaluates all three on test.csv. With --json it
prints one JSON line per dataset and system: dataset, system, accuracy, macro_f1, ece
(top-1 expected calibration error, 15 bins; null for the SVM, which gives no
probabilities), train_s (wall seconds to fit), model_bytes (model directory size for
taas, pickled pipeline size for the peers). Without --json, a readable table.
``--learners 1,2`` trains taas once per K (system ``taas-k1``, ``taas-k2``; the default,
one K of 1, keeps the system name ``taas``), to compare accuracy across learner counts.
"""

from __future__ import annotations

import argparse
import json
import pickle
import tempfile
import time
from pathlib import Path

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline, make_union
from sklearn.svm import LinearSVC

from trainer import LabelledData, LoadedModel, read_labelled_csv, train
from trainer.evaluate import classification_report, expected_calibration_error

SYSTEMS = ("taas", "tfidf-logreg", "tfidf-svm")


def dataset_name(folder: Path) -> str:
    """The folder's own name: 'snips' for .../snips, 'goo2018' for .../snips/goo2018."""
    return folder.resolve().name


def _row(
    dataset: str,
    system: str,
    test: LabelledData,
    predicted: list[str],
    confidence: list[float] | None,
    train_s: float,
    model_bytes: int,
) -> dict[str, object]:
    report = classification_report(test.labels, predicted)
    ece = None
    if confidence is not None:
        correct = [p == t for p, t in zip(predicted, test.labels, strict=True)]
        ece = round(expected_calibration_error(confidence, correct), 4)
    return {
        "dataset": dataset,
        "system": system,
        "accuracy": round(float(report["accuracy"]), 4),  # type: ignore[arg-type]
        "macro_f1": round(float(report["macro_f1"]), 4),  # type: ignore[arg-type]
        "ece": ece,
        "train_s": round(train_s, 2),
        "model_bytes": model_bytes,
    }


def run_taas(
    dataset: str, train_data: LabelledData, test: LabelledData, learners: int = 1, system: str = "taas"
) -> dict[str, object]:
    """Train (with ``learners`` learners) and evaluate taas in a temporary directory."""
    with tempfile.TemporaryDirectory(prefix="taas-bench-") as tmp:
        started = time.perf_counter()
        train(train_data, workdir=Path(tmp) / "work", out_dir=Path(tmp) / "model", learners=learners)
        train_s = time.perf_counter() - started
        model_bytes = sum(p.stat().st_size for p in (Path(tmp) / "model").iterdir())
        scores = LoadedModel.load(Path(tmp) / "model").classify(test.texts)
    return _row(
        dataset, system, test, [s[0][0] for s in scores], [s[0][1] for s in scores], train_s, model_bytes
    )


def run_peer(dataset: str, system: str, train_data: LabelledData, test: LabelledData) -> dict[str, object]:
    """Train and evaluate one TF-IDF peer ('tfidf-logreg' or 'tfidf-svm')."""
    features = make_union(
        TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True),
        TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), sublinear_tf=True),
    )
    linear = LogisticRegression(C=10, max_iter=2000) if system == "tfidf-logreg" else LinearSVC(C=1)
    pipeline = make_pipeline(features, linear)
    started = time.perf_counter()
    pipeline.fit(train_data.texts, train_data.labels)
    train_s = time.perf_counter() - started
    predicted = [str(p) for p in pipeline.predict(test.texts)]
    confidence = None
    if system == "tfidf-logreg":
        confidence = np.max(pipeline.predict_proba(test.texts), axis=1).tolist()
    return _row(dataset, system, test, predicted, confidence, train_s, len(pickle.dumps(pipeline)))


def benchmark(folder: Path, learners: tuple[int, ...] = (1,), peers: bool = True) -> list[dict[str, object]]:
    """One result row per system (and per K for taas) for the dataset in ``folder``."""
    train_data = read_labelled_csv(folder / "train.csv")
    test = read_labelled_csv(folder / "test.csv")
    dataset = dataset_name(folder)
    rows = [
        run_taas(dataset, train_data, test, k, "taas" if learners == (1,) else f"taas-k{k}") for k in learners
    ]
    if peers:
        rows += [run_peer(dataset, system, train_data, test) for system in SYSTEMS[1:]]
    return rows


def _table(rows: list[dict[str, object]]) -> str:
    header = (
        f"{'dataset':<20} {'system':<13} {'accuracy':>8} {'macro_f1':>8} {'ece':>6} {'train_s':>8} "
        f"{'model_bytes':>12}"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        ece = "-" if r["ece"] is None else f"{r['ece']:.3f}"
        lines.append(
            f"{r['dataset']:<20} {r['system']:<13} {r['accuracy']:>8.3f} {r['macro_f1']:>8.3f} {ece:>6} "
            f"{r['train_s']:>8.2f} {r['model_bytes']:>12,}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("datasets", nargs="+", type=Path, help="folders holding train.csv and test.csv")
    parser.add_argument("--json", action="store_true", help="one JSON line per dataset and system")
    parser.add_argument("--learners", default="1", help="comma-separated K values for taas (0 = cores)")
    parser.add_argument("--no-peers", action="store_true", help="taas only, skip the scikit-learn peers")
    args = parser.parse_args()
    learners = tuple(int(k) for k in args.learners.split(","))
    rows: list[dict[str, object]] = []
    for folder in args.datasets:
        for row in benchmark(folder, learners, peers=not args.no_peers):
            rows.append(row)
            if args.json:
                print(json.dumps(row), flush=True)
    if not args.json:
        print(_table(rows))


if __name__ == "__main__":
    main()
