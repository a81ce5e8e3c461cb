"""Out-of-scope detection: how much a text looks like the texts a classifier was trained on.

A single-label classifier always answers one of its classes; a text of none of them ("what's
the weather" sent to a banking bot) gets one too. Its ``in_scope_score`` says how it ranks
among the classifier's own in-scope texts: the share of the held-out training rows (those a
model was scored on without having trained on them: trainer.held_out) whose raw score is
lower. A classifier rejects a text whose score is below a false-rejection rate (default
HParams.in_scope_rate, 2 %): about that share of in-scope texts is rejected, and no
out-of-scope example is needed to set it. A tenant may ask for another rate without
retraining: the scores do not change, only the rate they are compared with.

The raw score is the calibrated confidence (the top class's softmax), standardised by its
mean and deviation on the held-out rows, plus for a model on a sentence encoder the cosine
of the text's embedding to its nearest training text, standardised the same way and weighed
by HParams.in_scope_neighbour_weight. On validation folds with a quarter of the classes
left out, the nearest text added 0.004 to 0.022 AUROC to the confidence on the chatbot sets
and, at half weight, cost nothing on trec50's question types (docs/experiments/out-of-scope.md).
A held-out row's nearest text is the nearest other distinct training text: at serving time
every training text is a neighbour.

A tenant with examples of irrelevant text trains them under the reserved class
``OUT_OF_SCOPE_CLASS``: the model learns it as a class, which takes probability from the
others on texts like them, but never answers with it (``without_negatives``). Its examples are
not in-scope rows: they are left out of the held-out rows and of the nearest texts, the
confidence is the top in-scope class's probability before the others are renormalised, and a
text whose most probable class is the reserved one scores 0.

In a model directory: ``model.json``'s ``"in_scope"`` (the standardisation, the weight, the
default rate, the held-out raw scores' quantiles) and, for an encoder model, the distinct
training texts' embeddings as ``weights.pt``'s ``"in_scope.neighbours"`` (float16). A model
without them (multi-label, or trained before this) answers without a score.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from trainer.calibration import softmax

NEIGHBOURS = "in_scope.neighbours"  # the weights.pt tensor of the training texts' embeddings
QUANTILES = 1001  # held-out raw scores kept at 0, 0.1 %, ..., 100 %
_NUMBERS = (
    "rate",
    "confidence_mean",
    "confidence_std",
    "neighbour_weight",
    "neighbour_mean",
    "neighbour_std",
)
_CHUNK = 1024  # held-out rows whose cosines are computed at a time (1024 x 10,000 x 4 bytes)


@dataclass(frozen=True)
class InScope:
    """A classifier's out-of-scope scoring (see the module docstring)."""

    rate: float  # the default false-rejection rate
    confidence_mean: float
    confidence_std: float
    neighbour_weight: float  # 0: the confidence alone
    neighbour_mean: float
    neighbour_std: float
    quantiles: np.ndarray  # QUANTILES raw scores of the held-out rows, rising
    neighbours: torch.Tensor | None  # training texts x dim, float32, rows L2-normalised

    @property
    def nbytes(self) -> int:
        """Memory the scoring holds."""
        extra = self.neighbours.numel() * self.neighbours.element_size() if self.neighbours is not None else 0
        return int(self.quantiles.nbytes) + extra

    def raw(self, confidences: np.ndarray, embeddings: np.ndarray | None) -> np.ndarray:
        """The raw scores of texts whose top confidences and (for an encoder model) sentence
        embeddings these are: higher is more in scope."""
        score = (np.asarray(confidences, dtype=np.float64) - self.confidence_mean) / self.confidence_std
        if self.neighbours is not None and self.neighbour_weight:
            if embeddings is None:
                raise ValueError("an encoder model's in-scope score needs the texts' embeddings")
            nearest = nearest_cosines(self.neighbours, torch.from_numpy(np.asarray(embeddings, np.float32)))
            score += self.neighbour_weight * (nearest - self.neighbour_mean) / self.neighbour_std
        return score

    def scores(self, confidences: np.ndarray, embeddings: np.ndarray | None) -> np.ndarray:
        """Each text's in-scope score in [0, 1]: the share of held-out in-scope rows whose raw
        score is below its own (linear between the kept quantiles)."""
        return np.interp(self.raw(confidences, embeddings), self.quantiles, np.linspace(0.0, 1.0, QUANTILES))

    def as_dict(self) -> dict[str, Any]:
        """model.json's ``"in_scope"`` (the neighbours go into weights.pt)."""
        return {
            "rate": self.rate,
            "confidence_mean": self.confidence_mean,
            "confidence_std": self.confidence_std,
            "neighbour_weight": self.neighbour_weight,
            "neighbour_mean": self.neighbour_mean,
            "neighbour_std": self.neighbour_std,
            "quantiles": [float(q) for q in self.quantiles],
        }

    @classmethod
    def from_dict(cls, values: object, neighbours: torch.Tensor | None, dim: int | None) -> InScope:
        """model.json's ``"in_scope"`` and the stored neighbours, checked (a bundle's files come
        from outside): ValueError names what does not fit. ``dim``: the encoder embedding's
        width (None: an n-gram model, which has no neighbours)."""
        if not isinstance(values, dict):
            raise ValueError("'in_scope' must be an object")
        numbers: dict[str, float] = {}
        for name in _NUMBERS:
            value = values.get(name)
            if not isinstance(value, int | float) or isinstance(value, bool) or not np.isfinite(value):
                raise ValueError(f"in_scope {name} must be a finite number, not {value!r}")
            numbers[name] = float(value)
        if not 0.0 < numbers["rate"] < 1.0:
            raise ValueError(f"in_scope rate {numbers['rate']} is not between 0 and 1")
        for name in ("confidence_std", "neighbour_std"):
            if numbers[name] <= 0.0:
                raise ValueError(f"in_scope {name} must be positive")
        quantiles = values.get("quantiles")
        if not (
            isinstance(quantiles, list)
            and len(quantiles) == QUANTILES
            and all(type(q) in (int, float) for q in quantiles)
        ):
            raise ValueError(f"in_scope quantiles must be {QUANTILES} numbers")
        levels = np.array(quantiles, dtype=np.float64)
        if not (np.isfinite(levels).all() and (np.diff(levels) >= 0).all()):
            raise ValueError("in_scope quantiles must be finite and rising")
        if numbers["neighbour_weight"] and neighbours is None:
            raise ValueError(f"in_scope weighs the nearest training text, and there is no '{NEIGHBOURS}'")
        if neighbours is not None:
            if dim is None or neighbours.dim() != 2 or neighbours.shape[1] != dim or not len(neighbours):
                raise ValueError(f"'{NEIGHBOURS}' must be training texts x their embeddings' {dim} values")
            neighbours = neighbours.to(torch.float32)
            if not bool(torch.isfinite(neighbours).all()) or float(neighbours.abs().max()) > 1.0 + 1e-3:
                raise ValueError(f"'{NEIGHBOURS}' must hold unit-length embeddings")
        kept = neighbours if numbers["neighbour_weight"] else None
        return cls(**numbers, quantiles=levels, neighbours=kept)


def nearest_cosines(
    neighbours: torch.Tensor, embeddings: torch.Tensor, exclude: np.ndarray | None = None
) -> np.ndarray:
    """Per embedding (L2-normalised rows), the cosine of its nearest row of ``neighbours``;
    ``exclude``: per embedding, the row of ``neighbours`` not to count (its own text)."""
    nearest = np.empty(len(embeddings), dtype=np.float64)
    for start in range(0, len(embeddings), _CHUNK):
        cosines = embeddings[start : start + _CHUNK] @ neighbours.T
        if exclude is not None:
            cosines[torch.arange(len(cosines)), torch.from_numpy(exclude[start : start + _CHUNK])] = -np.inf
        nearest[start : start + _CHUNK] = cosines.max(dim=1).values.numpy()
    return nearest


def top_confidences(probabilities: np.ndarray, negatives: int | None) -> np.ndarray:
    """Per row of class probabilities, the top in-scope class's (``negatives``: the column of
    OUT_OF_SCOPE_CLASS, or None)."""
    if negatives is None:
        return probabilities.max(axis=1)
    return np.delete(probabilities, negatives, axis=1).max(axis=1)


def without_negatives(probabilities: np.ndarray, negatives: int) -> np.ndarray:
    """Class probabilities without OUT_OF_SCOPE_CLASS's column (``negatives``), each row
    renormalised to sum to 1 (uniform where the reserved class took every bit of it)."""
    kept = np.delete(probabilities, negatives, axis=1)
    sums = kept.sum(axis=1, keepdims=True)
    uniform = np.full_like(kept, 1.0 / max(kept.shape[1], 1))
    return np.divide(kept, sums, out=uniform, where=sums > 0)


def fit_in_scope(
    logits: np.ndarray,
    temperature: float,
    negatives: int | None,
    neighbours: np.ndarray | None,
    own: np.ndarray | None,
    rate: float,
    neighbour_weight: float,
) -> InScope:
    """The scoring of a classifier from its in-scope held-out rows: their logits (before
    ``temperature``, -inf for a class their model never saw; ``negatives``: the column of
    OUT_OF_SCOPE_CLASS, or None) and, for an encoder model, every distinct in-scope training
    text's embedding (``neighbours``) with each held-out row's own text among them (``own``,
    its row index)."""
    confidences = top_confidences(softmax(logits, temperature), negatives)
    confidence_mean, confidence_std = _standardisation(confidences)
    raw = (confidences - confidence_mean) / confidence_std
    stored, neighbour_mean, neighbour_std, weight = None, 0.0, 1.0, 0.0
    # one distinct text has no other to be near
    if neighbours is not None and own is not None and neighbour_weight and len(neighbours) > 1:
        stored = torch.from_numpy(np.ascontiguousarray(neighbours, dtype=np.float32))
        nearest = nearest_cosines(stored, stored[torch.from_numpy(own)], own)
        neighbour_mean, neighbour_std = _standardisation(nearest)
        raw = raw + neighbour_weight * (nearest - neighbour_mean) / neighbour_std
        weight = neighbour_weight
    return InScope(
        rate=rate,
        confidence_mean=confidence_mean,
        confidence_std=confidence_std,
        neighbour_weight=weight,
        neighbour_mean=neighbour_mean,
        neighbour_std=neighbour_std,
        quantiles=np.quantile(raw, np.linspace(0.0, 1.0, QUANTILES)),
        neighbours=stored,
    )


def load_in_scope(meta: dict[str, Any], tensors: dict[str, Any], dim: int | None) -> InScope | None:
    """The scoring a model directory holds (model.json's ``meta``, weights.pt's ``tensors``),
    checked; None for a model without one. ValueError names what does not fit."""
    if meta.get("in_scope") is None:
        return None
    neighbours = tensors.get(NEIGHBOURS)
    if neighbours is not None and not isinstance(neighbours, torch.Tensor):
        raise ValueError(f"'{NEIGHBOURS}' is not a tensor")
    return InScope.from_dict(meta["in_scope"], neighbours, dim)


def _standardisation(values: np.ndarray) -> tuple[float, float]:
    """(mean, deviation) of ``values``; a deviation of 1 where they do not vary (tiny data
    whose every held-out row was sure): the score then only orders texts below and above."""
    std = float(values.std())
    return float(values.mean()), std if std > 1e-9 else 1.0
