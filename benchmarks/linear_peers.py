"""The linear peers of benchmarks/accuracy.py, validation_sweep.py and multilabel.py, as in
shared/data/BASELINES.md.

* ``tfidf-logreg`` / ``tfidf-svm``: scikit-learn TF-IDF word 1-2 + char_wb 2-5 grams (sublinear
  TF) into LogisticRegression(C=10, max_iter=2000) or LinearSVC(C=1);
* ``minilm-logreg``: LogisticRegression(C=10, max_iter=3000) on all-MiniLM-L6-v2's sentence
  embedding alone (normalised, through the same encoder taas ships, trainer.encoder, which
  gives sentence-transformers' embedding to 2e-5);
* ``minilm+tfidf-svm``: LinearSVC(C=1) on the TF-IDF features with that embedding x 2 appended
  as extra columns.

The MiniLM peers' train_s counts encoding the training texts (as taas's counts its own).
"""

from __future__ import annotations

import pickle
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline, make_pipeline, make_union
from sklearn.svm import LinearSVC

from trainer import LabelledData
from trainer.encoder import SentenceEncoder

MINILM_PEERS = ("minilm-logreg", "minilm+tfidf-svm")
EMBEDDING_WEIGHT = 2.0  # BASELINES.md's "embedding x 2" beside the TF-IDF columns


def tfidf_pipeline(system: str) -> Pipeline:
    """The unfitted TF-IDF peer 'tfidf-logreg' or 'tfidf-svm'."""
    features = make_union(
        TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True),
        TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), sublinear_tf=True),
    )
    linear = LogisticRegression(C=10, max_iter=2000) if system == "tfidf-logreg" else LinearSVC(C=1)
    return make_pipeline(features, linear)


def sentence_embeddings(encoder: SentenceEncoder, texts: list[str]) -> np.ndarray:
    """The encoder's own sentence embedding (its last layer, mean-pooled, normalised)."""
    return encoder.encode(texts, layers=(encoder.layers,))


@dataclass
class MinilmPeer:
    """A fitted frozen-encoder peer."""

    system: str
    model: Any
    features: Any | None  # the TF-IDF union of minilm+tfidf-svm, fitted

    def predict(self, texts: list[str], embeddings: np.ndarray) -> list[str]:
        """The predicted label of each text, from the texts and their sentence embeddings."""
        return [str(p) for p in self.model.predict(self._inputs(texts, embeddings))]

    def confidences(self, texts: list[str], embeddings: np.ndarray) -> list[float] | None:
        """The top class's probability per text (None for the SVM: no probabilities)."""
        if self.system != "minilm-logreg":
            return None
        return np.max(self.model.predict_proba(embeddings), axis=1).tolist()

    def _inputs(self, texts: list[str], embeddings: np.ndarray) -> Any:
        if self.features is None:
            return embeddings
        return sp.hstack(
            [self.features.transform(texts), sp.csr_matrix(embeddings * EMBEDDING_WEIGHT)]
        ).tocsr()


def fit_peer(system: str, data: LabelledData, embeddings: np.ndarray) -> MinilmPeer:
    """Fit ``system`` (one of MINILM_PEERS) on ``data`` and its texts' sentence ``embeddings``."""
    if system == "minilm-logreg":
        return MinilmPeer(system, LogisticRegression(C=10, max_iter=3000).fit(embeddings, data.labels), None)
    features = tfidf_pipeline("tfidf-svm").steps[0][1]
    tfidf = features.fit_transform(data.texts)
    inputs = sp.hstack([tfidf, sp.csr_matrix(embeddings * EMBEDDING_WEIGHT)]).tocsr()
    return MinilmPeer(system, LinearSVC(C=1).fit(inputs, data.labels), features)


def run_peer(
    system: str, train_data: LabelledData, test: LabelledData, encoder: SentenceEncoder
) -> tuple[list[str], list[float] | None, float, int, float]:
    """(predictions, confidences, train_s, model_bytes, load_s) of ``system`` trained on
    ``train_data`` and run on ``test``."""
    started = time.perf_counter()
    peer = fit_peer(system, train_data, sentence_embeddings(encoder, train_data.texts))
    train_s = time.perf_counter() - started
    blob = pickle.dumps(peer)
    started = time.perf_counter()
    peer = pickle.loads(blob)
    load_s = time.perf_counter() - started
    embeddings = sentence_embeddings(encoder, test.texts)
    return (
        peer.predict(test.texts, embeddings),
        peer.confidences(test.texts, embeddings),
        train_s,
        len(blob),
        load_s,
    )
