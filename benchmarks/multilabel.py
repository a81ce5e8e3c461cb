"""Multi-label accuracy of taas against a TF-IDF one-vs-rest linear SVM, on one split, in one run.

    python benchmarks/multilabel.py DATA_DIR [--json] [--learners K]

DATA_DIR holds train.csv and test.csv in taas's canonical format (header text,label, one row
per (text, label); benchmarks/data/reuters/build.py writes Reuters-21578's). Both files are
read as multi-label examples: the rows of one text are one example with all their labels.

* ``taas``: trainer.train(multi_label=True) with DEFAULT_HPARAMS and K learners (default 0:
  one per core, as the CLI), its labels those LoadedModel.labels_of gives (the saved
  threshold, at least the top class).
* ``tfidf-svm-ovr``: benchmarks/accuracy.py's TF-IDF features (word 1-2 + char_wb 2-5 grams,
  sublinear TF) into one LinearSVC(C=1) per class (one-vs-rest), each deciding at 0.

Both are scored by trainer.evaluate.multilabel_report on test.csv. One JSON line per system
with --json: dataset, system, micro_f1, macro_f1, hamming_loss, subset_accuracy, train_s
(wall seconds to fit), model_bytes (the model directory, or the pickled pipeline); without
it, a table.
"""

from __future__ import annotations

import argparse
import pickle
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from sklearn.multiclass import OneVsRestClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MultiLabelBinarizer

from trainer import LabelledData, LoadedModel, read_labelled_csv, train
from trainer.data import MultiLabelData
from trainer.evaluate import multilabel_report

sys.path.insert(0, str(Path(__file__).parent))
from accuracy import dataset_name, print_rows  # noqa: E402  (the sibling benchmark scripts)
from linear_peers import tfidf_pipeline  # noqa: E402

SCORES = ("micro_f1", "macro_f1", "hamming_loss", "subset_accuracy")


def _row(
    dataset: str,
    system: str,
    test: MultiLabelData,
    predicted: Sequence[Sequence[str]],
    train_s: float,
    model_bytes: int,
) -> dict[str, object]:
    report = multilabel_report(test.label_sets, predicted)
    return {
        "dataset": dataset,
        "system": system,
        **{key: round(float(report[key]), 4) for key in SCORES},  # type: ignore[arg-type]
        "train_s": round(train_s, 2),
        "model_bytes": model_bytes,
    }


def run_taas(dataset: str, rows: LabelledData, test: MultiLabelData, learners: int) -> dict[str, object]:
    """Train taas in multi-label mode on the canonical ``rows`` and score it on ``test``."""
    with tempfile.TemporaryDirectory(prefix="taas-multilabel-") as tmp:
        model_dir = Path(tmp) / "model"
        started = time.perf_counter()
        train(rows, workdir=Path(tmp) / "work", out_dir=model_dir, learners=learners, multi_label=True)
        train_s = time.perf_counter() - started
        model_bytes = sum(p.stat().st_size for p in model_dir.iterdir())
        model = LoadedModel.load(model_dir)
    predicted = [model.labels_of(scores) for scores in model.classify(test.texts)]
    return _row(dataset, "taas", test, predicted, train_s, model_bytes)


def run_svm(dataset: str, examples: MultiLabelData, test: MultiLabelData) -> dict[str, object]:
    """The TF-IDF peer of benchmarks/accuracy.py, its LinearSVC made one-vs-rest."""
    single = tfidf_pipeline("tfidf-svm")
    pipeline = make_pipeline(single[0], OneVsRestClassifier(single[-1]))
    binarizer = MultiLabelBinarizer(classes=examples.classes)
    started = time.perf_counter()
    pipeline.fit(examples.texts, binarizer.fit_transform(examples.label_sets))
    train_s = time.perf_counter() - started
    predicted = binarizer.inverse_transform(pipeline.predict(test.texts))
    return _row(dataset, "tfidf-svm-ovr", test, predicted, train_s, len(pickle.dumps(pipeline)))


def benchmark(folder: Path, learners: int) -> Iterator[dict[str, object]]:
    """One result row per system for the dataset in ``folder``, each as soon as it is measured."""
    rows = read_labelled_csv(folder / "train.csv")
    test = read_labelled_csv(folder / "test.csv").grouped()
    dataset = dataset_name(folder)
    yield run_taas(dataset, rows, test, learners)
    yield run_svm(dataset, rows.grouped(), test)


def _table(rows: list[dict[str, object]]) -> str:
    keys = (*SCORES, "train_s", "model_bytes")
    header = f"{'dataset':<12} {'system':<14} " + " ".join(f"{key:>15}" for key in keys)
    lines = [header, "-" * len(header)]
    lines += [
        f"{r['dataset']:<12} {r['system']:<14} " + " ".join(f"{r[key]:>15}" for key in keys) for r in rows
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path, help="folder holding train.csv and test.csv")
    parser.add_argument("--json", action="store_true", help="one JSON line per system")
    parser.add_argument("--learners", type=int, default=0, help="taas learners K (default 0: one per core)")
    args = parser.parse_args()
    print_rows(benchmark(args.dataset, args.learners), as_json=args.json, table=_table)


if __name__ == "__main__":
    main()
