"""Many classes with few rows each: taas's held-out accuracy against a nearest-centroid baseline.

    python benchmarks/many_classes.py 500x20 1000x10 2000x10 3000x6
    python benchmarks/many_classes.py 3000x7 --learners 1,4,16     # the same data at each K

Generated data, one JSON line per ``CLASSESxROWS`` set and K: each class has four key words
of its own (random letters, 3-8 of them), and a text holds two of those among five filler
words drawn from 300 shared ones. taas trains with DEFAULT_HPARAMS and K learners
(trainer.train; ``--learners``, default 1) and reports the accuracy on its own validation
split (``accuracy``, ``epochs``, ``train_s``); asynchronous learners must reach K = 1's;
``centroid`` is the accuracy of a TF-IDF nearest-centroid classifier (scikit-learn, sublinear
TF) fitted on the same training part and scored on the same validation rows. The signal is
plain (the centroid scores 1.0 or near it), so a gap is the trainer's, not the data's.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.neighbors import NearestCentroid

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from trainer import LabelledData, train  # noqa: E402
from trainer.data import stratified_split  # noqa: E402
from trainer.hparams import DEFAULT_HPARAMS  # noqa: E402


def many_classes(classes: int, per_class: int, seed: int = 7) -> LabelledData:
    """``per_class`` texts for each of ``classes`` classes (see the module docstring)."""
    rng = random.Random(seed)

    def word() -> str:
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 8)))

    filler = [word() for _ in range(300)]
    texts, labels = [], []
    for c in range(classes):
        keys = [word() for _ in range(4)]
        for _ in range(per_class):
            texts.append(" ".join(rng.sample(keys, 2) + rng.sample(filler, 5)))
            labels.append(f"intent_{c:04d}")
    return LabelledData(texts, labels)


def centroid_accuracy(data: LabelledData, train_rows: list[int], held_out: list[int]) -> float:
    """TF-IDF nearest-centroid accuracy on ``held_out`` after fitting on ``train_rows``."""
    features = TfidfVectorizer(sublinear_tf=True).fit([data.texts[i] for i in train_rows])
    model = NearestCentroid().fit(
        features.transform([data.texts[i] for i in train_rows]), [data.labels[i] for i in train_rows]
    )
    predicted = model.predict(features.transform([data.texts[i] for i in held_out]))
    return float(np.mean([p == data.labels[i] for p, i in zip(predicted, held_out, strict=True)]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sets", nargs="+", help="CLASSESxROWS, e.g. 2000x10")
    parser.add_argument("--learners", default="1", help="comma-separated K values to train with (default 1)")
    args = parser.parse_args()
    for spec in args.sets:
        classes, per_class = (int(n) for n in spec.split("x"))
        data = many_classes(classes, per_class)
        train_rows, held_out = stratified_split(
            data.labels, DEFAULT_HPARAMS.validation_fraction, DEFAULT_HPARAMS.seed
        )
        centroid = round(centroid_accuracy(data, list(train_rows), list(held_out)), 4)
        for learners in (int(k) for k in args.learners.split(",")):
            with tempfile.TemporaryDirectory(prefix="taas-many-") as tmp:
                started = time.perf_counter()
                result = train(
                    data, workdir=Path(tmp) / "work", out_dir=Path(tmp) / "model", learners=learners
                )
                train_s = time.perf_counter() - started
            row = {
                "set": spec,
                "learners": learners,
                "accuracy": round(float(result.metrics["accuracy"]), 4),
                "epochs": result.epochs,
                "train_s": round(train_s, 1),
                "centroid": centroid,
            }
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
