"""Which classes of a dataset a quick model confuses: the dataset report's confusable pairs.

Each text becomes a TF-IDF vector of its words, word pairs and character trigrams (after
:func:`normalised`), and a nearest-centroid classifier (cosine) is cross-validated on it over
stratified, seeded folds; every held-out row taken for another class counts towards that pair.
It is not the model taas trains, only a cheap probe of how much two classes' texts overlap:
classes it confuses often will be hard for any model. numpy only (scipy and scikit-learn are
not runtime dependencies), and bounded: at most :data:`MAX_ROWS` rows (a seeded sample that
keeps every class), at most :data:`MAX_FEATURES` n-grams (the most frequent), and a centroid
table of at most :data:`MAX_CENTROID_CELLS` cells (fewer features for many classes).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FOLDS = 5
SEED = 0
MAX_ROWS = 4_000
MAX_FEATURES = 1 << 14
MAX_CENTROID_CELLS = 1 << 21  # classes x features: 8 MiB of float32, and the scoring's work
TOP_PAIRS = 5
EXAMPLES_PER_PAIR = 2
_SCORE_CHUNK = 512  # held-out rows scored at once: a dense 512 x MAX_FEATURES block is 32 MiB
_SPACES = re.compile(r"\s+")
_ASCII_PUNCTUATION = {code: " " for code in range(128) if unicodedata.category(chr(code)).startswith("P")}


def normalised(text: str) -> str:
    """``text`` as near-duplicates share it: Unicode NFKC, case-folded, punctuation removed,
    white space collapsed to single spaces."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    if folded.isascii():  # most texts: one C call, not a Python step per character
        kept = folded.translate(_ASCII_PUNCTUATION)
    else:
        kept = "".join(" " if unicodedata.category(ch).startswith("P") else ch for ch in folded)
    return _SPACES.sub(" ", kept).strip()


@dataclass(frozen=True)
class HeldOutMistake:
    """A held-out row of ``class_name`` that the probe took for ``taken_for``."""

    text: str
    class_name: str
    taken_for: str


@dataclass(frozen=True)
class ConfusablePair:
    """Two classes and how many held-out rows of each the probe gave to the other."""

    class_a: str
    class_b: str
    a_as_b: int
    b_as_a: int
    evaluated_a: int  # held-out rows of class_a that were scored
    evaluated_b: int
    examples: list[HeldOutMistake]


@dataclass(frozen=True)
class Confusion:
    """The probe's result: rows scored, folds, held-out accuracy and the most confused pairs."""

    rows_evaluated: int
    folds: int
    accuracy: float | None  # None when no row could be scored
    pairs: list[ConfusablePair]


def confusable_classes(texts: Sequence[str], labels: Sequence[str]) -> Confusion:
    """Cross-validate the nearest-centroid probe on the rows ``texts[i], labels[i]`` (one row per
    text and class, as the canonical CSV has them) and return the :data:`TOP_PAIRS` pairs of
    classes it confused most. A row counts as right when the class it is given is any of its
    text's classes (multi-label data), and rows of a class with no row in the other folds are
    not scored."""
    classes = sorted(set(labels))
    if len(classes) < 2:
        return Confusion(0, FOLDS, None, [])
    index = {name: i for i, name in enumerate(classes)}
    rng = np.random.default_rng(SEED)
    y_all = np.array([index[label] for label in labels], dtype=np.int64)
    rows = _sample(y_all, rng)
    y = y_all[rows]
    kept_texts = [texts[i] for i in rows]
    classes_of_text: dict[str, set[int]] = {}
    for text, label in zip(texts, y_all.tolist(), strict=True):
        classes_of_text.setdefault(text, set()).add(label)
    max_features = max(16, min(MAX_FEATURES, MAX_CENTROID_CELLS // len(classes)))
    row_of, col_of, value_of, width = _tfidf([normalised(t) for t in kept_texts], max_features)
    folds = _stratified_folds(y, rng)
    predicted = np.full(len(rows), -1, dtype=np.int64)
    for fold in range(FOLDS):
        held_out = folds == fold
        centroids = _centroids(row_of, col_of, value_of, y, ~held_out, len(classes), width)
        trained = np.linalg.norm(centroids, axis=1) > 0
        scored = np.flatnonzero(held_out & trained[y])
        predicted[scored] = _nearest(row_of, col_of, value_of, scored, centroids, width)
    return _tally(kept_texts, y, predicted, classes, classes_of_text)


def _sample(y: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.int64]:
    """The rows the probe uses: all of them up to MAX_ROWS; past it a seeded sample of each
    class in proportion to its size, at least FOLDS rows of each (or all it has; 2 when the
    classes are too many for FOLDS each within MAX_ROWS)."""
    if len(y) <= MAX_ROWS:
        return np.arange(len(y), dtype=np.int64)
    labels = np.unique(y)
    least = max(2, min(FOLDS, MAX_ROWS // len(labels)))  # many classes: 2 each, scored once
    kept = []
    for label in labels:
        members = np.flatnonzero(y == label)
        quota = max(min(len(members), least), math.floor(MAX_ROWS * len(members) / len(y)))
        kept.append(rng.choice(members, size=quota, replace=False))
    return np.sort(np.concatenate(kept))


def _grams(text: str) -> list[str]:
    """A normalised text's features: words, adjacent word pairs, and character trigrams of the
    text padded with a space (which carry spelling variants and word endings)."""
    words = text.split()
    padded = f" {text} "
    return (
        [f"w:{w}" for w in words]
        + [f"p:{a} {b}" for a, b in zip(words, words[1:], strict=False)]
        + [f"c:{padded[i : i + 3]}" for i in range(len(padded) - 2)]
    )


def _tfidf(
    texts: Sequence[str], max_features: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float32], int]:
    """The rows' L2-normalised TF-IDF vectors (sublinear term frequency, smoothed IDF) over the
    ``max_features`` n-grams found in most texts (ties: the first seen), as sparse (row, column,
    value) triplets sorted by row, and the number of columns."""
    vocabulary: dict[str, int] = {}
    ids = [[vocabulary.setdefault(gram, len(vocabulary)) for gram in _grams(text)] for text in texts]
    gram_of = np.fromiter((i for found in ids for i in found), dtype=np.int64)
    row_of = np.repeat(np.arange(len(texts), dtype=np.int64), [len(found) for found in ids])
    cells, counts = np.unique(row_of * len(vocabulary) + gram_of, return_counts=True)
    rows, grams = np.divmod(cells, max(len(vocabulary), 1))
    document_frequency = np.bincount(grams, minlength=len(vocabulary))
    kept = np.argsort(-document_frequency, kind="stable")[:max_features]
    column_of = np.full(len(vocabulary), -1, dtype=np.int64)
    column_of[kept] = np.arange(len(kept))
    idf = np.log((1 + len(texts)) / (1 + document_frequency[kept])) + 1
    used = column_of[grams] >= 0
    rows, cols, counts = rows[used], column_of[grams[used]], counts[used]
    values = ((1 + np.log(counts)) * idf[cols]).astype(np.float32)
    norms = np.sqrt(np.bincount(rows, weights=values.astype(np.float64) ** 2, minlength=len(texts)))
    values /= np.maximum(norms[rows], 1e-12).astype(np.float32)
    return rows, cols, values, len(kept)


def _stratified_folds(y: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.int64]:
    """Each row's fold: every class's rows shuffled (seeded) and dealt round the folds, so each
    fold holds about a FOLDS-th of every class."""
    folds = np.empty(len(y), dtype=np.int64)
    for label in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == label))
        folds[members] = np.arange(len(members)) % FOLDS
    return folds


def _centroids(
    rows: npt.NDArray[np.int64],
    cols: npt.NDArray[np.int64],
    values: npt.NDArray[np.float32],
    y: npt.NDArray[np.int64],
    training: npt.NDArray[np.bool_],
    classes: int,
    width: int,
) -> npt.NDArray[np.float32]:
    """Each class's unit-length mean of its training rows' vectors (zero for a class with none)."""
    used = training[rows]
    cells = y[rows[used]] * width + cols[used]
    sums = np.bincount(cells, weights=values[used], minlength=classes * width).reshape(classes, width)
    norms = np.linalg.norm(sums, axis=1, keepdims=True)
    return (sums / np.maximum(norms, 1e-12)).astype(np.float32)


def _nearest(
    rows: npt.NDArray[np.int64],
    cols: npt.NDArray[np.int64],
    values: npt.NDArray[np.float32],
    scored: npt.NDArray[np.int64],
    centroids: npt.NDArray[np.float32],
    width: int,
) -> npt.NDArray[np.int64]:
    """The class whose centroid is nearest (highest cosine) to each row of ``scored``."""
    position = np.full(int(rows.max(initial=-1)) + 1, -1, dtype=np.int64)
    found = np.empty(len(scored), dtype=np.int64)
    for start in range(0, len(scored), _SCORE_CHUNK):
        chunk = scored[start : start + _SCORE_CHUNK]
        position[chunk] = np.arange(len(chunk))
        mine = np.flatnonzero(np.isin(rows, chunk))
        dense = np.zeros((len(chunk), width), dtype=np.float32)
        dense[position[rows[mine]], cols[mine]] = values[mine]
        found[start : start + len(chunk)] = np.argmax(dense @ centroids.T, axis=1)
        position[chunk] = -1
    return found


def _tally(
    texts: Sequence[str],
    y: npt.NDArray[np.int64],
    predicted: npt.NDArray[np.int64],
    classes: Sequence[str],
    classes_of_text: dict[str, set[int]],
) -> Confusion:
    """The scored rows' accuracy and the most confused pairs, with a few of their mistakes."""
    scored = np.flatnonzero(predicted >= 0)
    evaluated = np.bincount(y[scored], minlength=len(classes))
    mistakes: dict[tuple[int, int], list[int]] = {}
    right = 0
    for row in scored.tolist():
        truth, guess = int(y[row]), int(predicted[row])
        if guess in classes_of_text[texts[row]]:
            right += 1
        else:
            mistakes.setdefault((truth, guess), []).append(row)
    confused: Counter[tuple[int, int]] = Counter()
    for (truth, guess), rows in mistakes.items():
        confused[min(truth, guess), max(truth, guess)] += len(rows)
    ranked = sorted(confused, key=lambda pair: (-confused[pair], classes[pair[0]], classes[pair[1]]))
    shown = []
    for a, b in ranked[:TOP_PAIRS]:
        a_rows, b_rows = mistakes.get((a, b), []), mistakes.get((b, a), [])
        examples = [
            HeldOutMistake(texts[row], classes[int(y[row])], classes[int(predicted[row])])
            for row in (a_rows[:1] + b_rows[:1] + a_rows[1:] + b_rows[1:])[:EXAMPLES_PER_PAIR]
        ]
        shown.append(
            ConfusablePair(
                classes[a],
                classes[b],
                len(a_rows),
                len(b_rows),
                int(evaluated[a]),
                int(evaluated[b]),
                examples,
            )
        )
    accuracy = right / len(scored) if len(scored) else None
    return Confusion(len(scored), FOLDS, accuracy, shown)
