"""Accuracy, calibration and serving limits of taas against fastText and TF-IDF peers.

    python benchmarks/accuracy.py DATASET_DIR... [--json] [--learners K[,K...]] [--seeds N] [--no-peers]
        [--device cuda] [--language LANG]
    python benchmarks/accuracy.py --stress [--json]

Each DATASET_DIR holds train.csv and test.csv (header text,label). For each folder this
trains taas (trainer.train, DEFAULT_HPARAMS, K = 1 in-process unless --learners says
otherwise) as a classifier of ``--language`` (default en) trains on the platform: on the
shared sentence encoder where one reads the language (trainer.hparams.encoder_for), its
train_s counting the encoding; and five peers, then evaluates all of them on test.csv, side by
side in one run:

* ``fasttext``: fastText's supervised classifier (the ``fasttext-wheel`` bindings) as
  tuned in shared/data/BASELINES.md: 25 epochs, lr 0.5, word bigrams, char 2-5 grams,
  one thread, seed 0, lower-cased text. Skipped with a message on stderr when the
  package is not installed.
* ``tfidf-logreg`` / ``tfidf-svm``: scikit-learn TF-IDF word 1-2 + char_wb 2-5 grams
  (sublinear TF) into LogisticRegression(C=10, max_iter=2000) or LinearSVC(C=1);
* ``minilm-logreg`` / ``minilm+tfidf-svm``: the frozen all-MiniLM-L6-v2 embedding alone in
  that logistic regression, or appended (x 2) to the TF-IDF features in that SVM
  (benchmarks/linear_peers.py).

With --json it prints one JSON line per dataset and system: dataset, system, correct
(test rows right), accuracy, macro_f1, f1_without_none (micro-F1 with the reject class
``None`` left out, the metric of the NLU-Evaluation corpora's published figures; null where
there is no ``None`` class), ece
(top-1 expected calibration error, 15 bins; null for the SVM, which gives no probabilities),
train_s (wall seconds to fit), model_bytes (model directory size for taas, the saved model
file for fastText, the pickled pipeline for the TF-IDF peers) and load_s (cold load of the
saved model, the import already done); each peer's row also has vs_taas, the paired
comparison with the (first) taas row on the same test rows: taas_only and peer_only (rows
only that system gets right) and mcnemar_p (the exact McNemar test's two-sided p-value).
After the last folder, one row per system with ``"dataset": "pooled"``: its test rows right
over every folder (``correct`` of ``rows``) and the folders where a peer beats taas with
McNemar p < 0.05 (``peer_significantly_ahead``). Without --json, a readable table.
``--learners 1,2`` trains taas once per K (system ``taas-k1``, ``taas-k2``; the default, one
K of 1, keeps the system name ``taas``). ``--device cuda`` trains taas on the GPU (K = 1: the
CUDA graph learner); the peers train on the CPU either way. ``--seeds N`` trains taas N times
per K, with DEFAULT_HPARAMS' seed and the N - 1 seeds after it (``taas-seed1``...; the seed
picks the validation split, the initial weights and the batches' order): the spread of
taas's test rows over seeds, which no setting was or may be chosen by, is the resolution of
a comparison on one test file. Every taas row carries its ``seed``.

``--stress`` trains taas alone on generated data of 20,000 rows and 3,000 classes (and
on one of 5 classes with 1 or 2 examples each): the large and tiny ends the trainer must
survive without divergence, NaN or unbounded time. Its rows score one held-out row per class
(the class's key words among other filler words). benchmarks/many_classes.py has a harder
many-class set.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pickle
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import binomtest

from trainer import DEFAULT_HPARAMS, LabelledData, LoadedModel, read_labelled_csv, train
from trainer.encoder import SentenceEncoder, shared_encoder
from trainer.evaluate import classification_report, expected_calibration_error, micro_f1
from trainer.hparams import encoder_for

sys.path.insert(0, str(Path(__file__).parent))
from linear_peers import MINILM_PEERS, run_peer, tfidf_pipeline  # noqa: E402  (a sibling script)

PEERS = ("fasttext", "tfidf-logreg", "tfidf-svm", *MINILM_PEERS)
NONE_CLASS = "None"  # the reject class of the NLU-Evaluation corpora


def dataset_name(folder: Path) -> str:
    """The folder's own name, after its parent's where the parent is a data set too (holds its
    own train.csv): 'snips' for .../snips, 'snips/goo2018' for .../snips/goo2018. (The folder's
    name alone named each hint3 set's ``v1`` "v1".)"""
    folder = folder.resolve()
    return f"{folder.parent.name}/{folder.name}" if (folder.parent / "train.csv").is_file() else folder.name


@dataclass(frozen=True)
class Measured:
    """One system's result row, and per test row whether it got it right (for ``paired``)."""

    row: dict[str, object]
    right: list[bool]


def _row(
    dataset: str,
    system: str,
    test: LabelledData,
    predicted: list[str],
    confidence: list[float] | None,
    train_s: float,
    model_bytes: int,
    load_s: float,
) -> Measured:
    report = classification_report(test.labels, predicted)
    right = [p == t for p, t in zip(predicted, test.labels, strict=True)]
    ece = None
    if confidence is not None:
        ece = round(expected_calibration_error(confidence, right), 4)
    row: dict[str, object] = {
        "dataset": dataset,
        "system": system,
        "correct": sum(right),
        "rows": len(right),
        "accuracy": round(float(report["accuracy"]), 4),  # type: ignore[arg-type]
        "macro_f1": round(float(report["macro_f1"]), 4),  # type: ignore[arg-type]
        "f1_without_none": f1_without_none(test.labels, predicted),
        "ece": ece,
        "train_s": round(train_s, 2),
        "model_bytes": model_bytes,
        "load_s": round(load_s, 4),
    }
    return Measured(row, right)


def paired(taas: list[bool], peer: list[bool]) -> dict[str, object]:
    """The peer against taas on the same test rows: the rows only taas gets right, the rows only
    the peer does, and the exact McNemar test's two-sided p-value (a binomial test of those two
    counts), the chance of a split at least that uneven if the two were equally good."""
    taas_only = sum(t and not p for t, p in zip(taas, peer, strict=True))
    peer_only = sum(p and not t for t, p in zip(taas, peer, strict=True))
    p_value = binomtest(taas_only, taas_only + peer_only).pvalue if taas_only + peer_only else 1.0
    return {"taas_only": taas_only, "peer_only": peer_only, "mcnemar_p": round(float(p_value), 4)}


def f1_without_none(truth: list[str], predicted: list[str]) -> float | None:
    """Micro-F1 over the real intents, the reject class ``None`` ignored (Braun et al. 2017's
    metric, which the NLU-Evaluation folders' published figures use; their SOURCE.md): a row
    predicted ``None`` adds no false positive, a real-intent row predicted as anything else
    is a false negative. None (null) for a data set without a ``None`` class."""
    if NONE_CLASS not in truth:
        return None
    column = {label: i for i, label in enumerate(sorted(set(truth) | set(predicted) - {NONE_CLASS}))}

    def one_hot(labels: list[str]) -> np.ndarray:  # a None row is all False
        chosen = np.zeros((len(labels), len(column)), dtype=bool)
        for row, label in enumerate(labels):
            if label != NONE_CLASS:
                chosen[row, column[label]] = True
        return chosen

    return round(micro_f1(one_hot(truth), one_hot(predicted)), 4)


def run_taas(
    dataset: str,
    train_data: LabelledData,
    test: LabelledData,
    learners: int = 1,
    system: str = "taas",
    device: str = "cpu",
    seed: int = DEFAULT_HPARAMS.seed,
    encoder: SentenceEncoder | None = None,
) -> Measured:
    """Train (with ``learners`` learners, on ``device``, from ``seed``, on ``encoder`` if any)
    and evaluate taas in a temporary directory."""
    hparams = dataclasses.replace(DEFAULT_HPARAMS, seed=seed)
    with tempfile.TemporaryDirectory(prefix="taas-bench-") as tmp:
        model_dir = Path(tmp) / "model"
        started = time.perf_counter()
        train(
            train_data,
            workdir=Path(tmp) / "work",
            out_dir=model_dir,
            hparams=hparams,
            learners=learners,
            device=device,
            encoder=encoder,
        )
        train_s = time.perf_counter() - started
        model_bytes = sum(p.stat().st_size for p in model_dir.iterdir())
        started = time.perf_counter()
        model = LoadedModel.load(model_dir)
        load_s = time.perf_counter() - started
        scores = model.classify(test.texts)
    predicted, confidence = [s[0][0] for s in scores], [s[0][1] for s in scores]
    measured = _row(dataset, system, test, predicted, confidence, train_s, model_bytes, load_s)
    measured.row["seed"] = seed
    return measured


def _fasttext_line(text: str) -> str:
    return " ".join(text.lower().split())


def run_fasttext(dataset: str, train_data: LabelledData, test: LabelledData) -> Measured | None:
    """Train and evaluate fastText; None (and a message on stderr) when it is not installed."""
    try:
        import fasttext
    except ImportError:
        print("fasttext peer skipped: `pip install fasttext-wheel` to include it", file=sys.stderr)
        return None
    labels = sorted(set(train_data.labels))
    label_of = {f"__label__{i}": label for i, label in enumerate(labels)}  # labels may hold spaces
    token = {label: key for key, label in label_of.items()}
    with tempfile.TemporaryDirectory(prefix="fasttext-bench-") as tmp:
        corpus = Path(tmp) / "train.txt"
        corpus.write_text(
            "".join(
                f"{token[y]} {_fasttext_line(x)}\n"
                for x, y in zip(train_data.texts, train_data.labels, strict=True)
            ),
            encoding="utf-8",
        )
        options: dict[str, Any] = {"epoch": 25, "lr": 0.5, "wordNgrams": 2, "minn": 2, "maxn": 5}
        options.update(thread=1, seed=0, verbose=0)
        started = time.perf_counter()
        model = fasttext.train_supervised(str(corpus), **options)
        train_s = time.perf_counter() - started
        saved = Path(tmp) / "model.bin"
        model.save_model(str(saved))
        started = time.perf_counter()
        model = fasttext.load_model(str(saved))
        load_s = time.perf_counter() - started
        # model.f.predict, not model.predict: the 0.9.2 wrapper's np.array(copy=False) fails on numpy 2
        top = [model.f.predict(_fasttext_line(text) + "\n", 1, 0.0, "strict")[0] for text in test.texts]
        return _row(
            dataset,
            "fasttext",
            test,
            [label_of[name] for _, name in top],
            [min(1.0, float(p)) for p, _ in top],
            train_s,
            saved.stat().st_size,
            load_s,
        )


def run_minilm(
    dataset: str, system: str, train_data: LabelledData, test: LabelledData, encoder: SentenceEncoder
) -> Measured:
    """Train and evaluate one frozen-encoder peer ('minilm-logreg' or 'minilm+tfidf-svm')."""
    predicted, confidence, train_s, model_bytes, load_s = run_peer(system, train_data, test, encoder)
    return _row(dataset, system, test, predicted, confidence, train_s, model_bytes, load_s)


def run_tfidf(dataset: str, system: str, train_data: LabelledData, test: LabelledData) -> Measured:
    """Train and evaluate one TF-IDF peer ('tfidf-logreg' or 'tfidf-svm')."""
    pipeline = tfidf_pipeline(system)
    started = time.perf_counter()
    pipeline.fit(train_data.texts, train_data.labels)
    train_s = time.perf_counter() - started
    blob = pickle.dumps(pipeline)
    started = time.perf_counter()
    pipeline = pickle.loads(blob)
    load_s = time.perf_counter() - started
    predicted = [str(p) for p in pipeline.predict(test.texts)]
    confidence = None
    if system == "tfidf-logreg":
        confidence = np.max(pipeline.predict_proba(test.texts), axis=1).tolist()
    return _row(dataset, system, test, predicted, confidence, train_s, len(blob), load_s)


def benchmark(
    folder: Path,
    learners: tuple[int, ...] = (1,),
    peers: bool = True,
    device: str = "cpu",
    seeds: int = 1,
    language: str = "en",
) -> list[dict[str, object]]:
    """One result row per system (and per K and seed for taas) for the dataset in ``folder``;
    the peers are paired with the first taas row."""
    train_data = read_labelled_csv(folder / "train.csv")
    test = read_labelled_csv(folder / "test.csv")
    dataset = dataset_name(folder)
    spec = encoder_for(language)
    encoder = shared_encoder(spec.name) if spec is not None else None
    measured = [
        run_taas(
            dataset,
            train_data,
            test,
            k,
            _taas_system(k, learners, i),
            device,
            DEFAULT_HPARAMS.seed + i,
            encoder,
        )
        for k in learners
        for i in range(seeds)
    ]
    taas_rows = len(measured)
    if peers:
        fasttext_result = run_fasttext(dataset, train_data, test)
        measured += [fasttext_result] if fasttext_result is not None else []
        measured += [run_tfidf(dataset, system, train_data, test) for system in ("tfidf-logreg", "tfidf-svm")]
        minilm = encoder or shared_encoder("all-MiniLM-L6-v2")  # the peers read English either way
        measured += [run_minilm(dataset, system, train_data, test, minilm) for system in MINILM_PEERS]
    for peer in measured[taas_rows:]:
        peer.row["vs_taas"] = paired(measured[0].right, peer.right)
    return [m.row for m in measured]


def _taas_system(learners: int, all_learners: tuple[int, ...], seed_index: int) -> str:
    """'taas', or 'taas-k2' where several K are compared, with '-seed1'... after the first seed."""
    name = "taas" if all_learners == (1,) else f"taas-k{learners}"
    return f"{name}-seed{seed_index}" if seed_index else name


def stress_data(rows: int, classes: int, seed: int = 0) -> LabelledData:
    """``rows`` short texts over ``classes`` classes, each class with its own three key words."""
    rng = random.Random(seed)
    filler = [f"w{i}" for i in range(2000)]
    texts, labels = [], []
    for i in range(rows):
        label = i % classes
        words = [f"k{label}x{j}" for j in range(3)] + rng.sample(filler, 6)
        rng.shuffle(words)
        texts.append(" ".join(words))
        labels.append(f"class {label}")
    return LabelledData(texts, labels)


def stress(learners: int) -> list[dict[str, object]]:
    """taas on the two ends of the size range, scored on held-out rows of the same classes (their
    key words, other filler): a model that survives but does not learn shows here."""
    return [
        run_taas(name, stress_data(rows, classes), stress_data(classes, classes, seed=1), learners).row
        for name, rows, classes in (("stress-20000x3000", 20_000, 3_000), ("stress-8x5", 8, 5))
    ]


def _table(rows: list[dict[str, object]]) -> str:
    header = (
        f"{'dataset':<20} {'system':<17} {'accuracy':>8} {'macro_f1':>8} {'ece':>6} {'train_s':>8} "
        f"{'model_bytes':>12} {'load_s':>7}"
    )
    lines = [header, "-" * len(header)]
    for r in rows:
        if r["dataset"] == "pooled":
            lines.append(
                f"{'pooled':<20} {r['system']:<17} {r['accuracy']:>8.3f}  ({r['correct']} of {r['rows']})"
            )
            continue
        ece = "-" if r["ece"] is None else f"{r['ece']:.3f}"
        lines.append(
            f"{r['dataset']:<20} {r['system']:<17} {r['accuracy']:>8.3f} {r['macro_f1']:>8.3f} {ece:>6} "
            f"{r['train_s']:>8.2f} {r['model_bytes']:>12,} {r['load_s']:>7.3f}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("datasets", nargs="*", type=Path, help="folders holding train.csv and test.csv")
    parser.add_argument("--json", action="store_true", help="one JSON line per dataset and system")
    parser.add_argument("--learners", default="1", help="comma-separated K values for taas (0 = auto)")
    parser.add_argument("--seeds", type=int, default=1, help="train taas with this many seeds (default 1)")
    parser.add_argument("--no-peers", action="store_true", help="taas only, skip the peers")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where taas trains")
    parser.add_argument("--language", default="en", help="the classifiers' language (en: on the encoder)")
    parser.add_argument(
        "--stress", action="store_true", help="taas on 20,000 rows x 3,000 classes and on 8 rows"
    )
    args = parser.parse_args()
    if not args.datasets and not args.stress:
        parser.error("name at least one DATASET_DIR, or --stress")
    if args.seeds < 1:
        parser.error(f"--seeds must be at least 1, not {args.seeds}")
    learners = tuple(int(k) for k in args.learners.split(","))
    runs = [
        lambda folder=folder: benchmark(
            folder, learners, not args.no_peers, args.device, args.seeds, args.language
        )
        for folder in args.datasets
    ]
    if args.stress:
        runs.append(lambda: stress(learners[0]))
    print_rows(_with_pooled(row for run in runs for row in run()), as_json=args.json, table=_table)


def _with_pooled(rows: Iterable[dict[str, object]]) -> Iterator[dict[str, object]]:
    """``rows`` as they come, then one pooled row per system (see the module docstring)."""
    pooled: dict[str, dict[str, Any]] = {}
    datasets = set()
    for row in rows:
        yield row
        datasets.add(row["dataset"])
        total = pooled.setdefault(
            str(row["system"]), {"correct": 0, "rows": 0, "peer_significantly_ahead": []}
        )
        total["correct"] += row["correct"]
        total["rows"] += row["rows"]
        versus = row.get("vs_taas")
        if (
            isinstance(versus, dict)
            and versus["mcnemar_p"] < 0.05
            and versus["peer_only"] > versus["taas_only"]
        ):
            total["peer_significantly_ahead"].append(row["dataset"])
    if len(datasets) > 1:
        for system, total in pooled.items():
            yield {
                "dataset": "pooled",
                "system": system,
                "accuracy": round(total["correct"] / total["rows"], 4),
                **total,
            }


def print_rows(
    rows: Iterable[dict[str, object]], *, as_json: bool, table: Callable[[list[dict[str, object]]], str]
) -> None:
    """Print each row as a JSON line the moment it is measured, or all of them as ``table``."""
    done: list[dict[str, object]] = []
    for row in rows:
        done.append(row)
        if as_json:
            print(json.dumps(row), flush=True)
    if not as_json:
        print(table(done))


if __name__ == "__main__":
    main()
