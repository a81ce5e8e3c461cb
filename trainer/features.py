"""Text to hashed n-gram bags, fastText-style, with TF-IDF weights.

Each text becomes two groups of features: word n-grams (1..word_ngrams) and character
n-grams (char_ngram_min..char_ngram_max) of each word padded as ``<word>`` (word-boundary
aware, like scikit-learn's ``char_wb``). Every n-gram is hashed with CRC-32 (stable across
processes and machines, unlike Python's ``hash()``) into ``buckets`` ids.

Fitting keeps the buckets seen in training (at most ``max_features``, most frequent first)
and gives each a row of the embedding table and a smoothed IDF. A text's bag holds the rows
of its known n-grams weighted by sublinear TF x IDF, L2-normalised per group; n-grams never
seen in training are dropped, as a vectoriser fitted on the training data drops them.
"""

from __future__ import annotations

import re
import unicodedata
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

_WORD = re.compile(r"\w+")
_GROUPS = 2  # 0: word n-grams, 1: character n-grams


@dataclass(frozen=True)
class FeaturizerConfig:
    """How texts are turned into n-gram ids; saved with every model."""

    word_ngrams: int = 2
    char_ngram_min: int = 2
    char_ngram_max: int = 5
    buckets: int = 1 << 24
    max_features: int = 400_000

    def as_dict(self) -> dict[str, int]:
        """JSON-safe dict of every field."""
        return asdict(self)


@dataclass(frozen=True)
class Bags:
    """A batch of weighted bags in EmbeddingBag's flat layout (ids, weights, offsets)."""

    ids: np.ndarray  # int64 rows of the embedding table
    weights: np.ndarray  # float32 per id
    offsets: np.ndarray  # int64 start of each text's bag in ids

    def __len__(self) -> int:
        return len(self.offsets)

    def select(self, indices: np.ndarray) -> Bags:
        """The bags of the given texts, in the given order."""
        ends = np.append(self.offsets[1:], len(self.ids))
        starts, stops = self.offsets[indices], ends[indices]
        lengths = stops - starts
        offsets = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
        positions = np.repeat(starts - offsets, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)
        return Bags(self.ids[positions], self.weights[positions], offsets)


def tokenize(text: str) -> list[str]:
    """Lower-cased NFKC word tokens (runs of letters, digits and underscores)."""
    return _WORD.findall(unicodedata.normalize("NFKC", text).lower())


def stable_hash(gram: str, group: int) -> int:
    """CRC-32 of the group tag and the UTF-8 n-gram: identical in every process."""
    return zlib.crc32(gram.encode("utf-8"), group + 1)


def _grams(tokens: list[str], config: FeaturizerConfig) -> tuple[Counter[str], Counter[str]]:
    words: Counter[str] = Counter()
    for n in range(1, config.word_ngrams + 1):
        for i in range(len(tokens) - n + 1):
            words[" ".join(tokens[i : i + n])] += 1
    chars: Counter[str] = Counter()
    for token in tokens:
        padded = f"<{token}>"
        for n in range(config.char_ngram_min, config.char_ngram_max + 1):
            for i in range(len(padded) - n + 1):
                chars[padded[i : i + n]] += 1
    return words, chars


def hashed_counts(texts: Sequence[str], config: FeaturizerConfig) -> tuple[np.ndarray, ...]:
    """Flat (text index, group, bucket, count) arrays of every distinct n-gram of every text."""
    cache: dict[tuple[int, str], int] = {}
    text_index: list[int] = []
    group_of: list[int] = []
    bucket_of: list[int] = []
    count_of: list[int] = []
    for index, text in enumerate(texts):
        for group, counts in enumerate(_grams(tokenize(text), config)):
            for gram, count in counts.items():
                key = (group, gram)
                bucket = cache.get(key)
                if bucket is None:
                    bucket = cache[key] = stable_hash(gram, group) % config.buckets
                text_index.append(index)
                group_of.append(group)
                bucket_of.append(bucket)
                count_of.append(count)
    return (
        np.asarray(text_index, dtype=np.int64),
        np.asarray(group_of, dtype=np.int64),
        np.asarray(bucket_of, dtype=np.int64),
        np.asarray(count_of, dtype=np.float32),
    )


class Featurizer:
    """Maps texts to TF-IDF-weighted bags over the embedding rows known from training."""

    def __init__(self, config: FeaturizerConfig, buckets: np.ndarray, idf: np.ndarray) -> None:
        self.config = config
        self.buckets = np.asarray(buckets, dtype=np.int64)  # sorted; row i <-> buckets[i]
        self.idf = np.asarray(idf, dtype=np.float32)

    @property
    def rows(self) -> int:
        """Rows of the embedding table this featurizer addresses."""
        return len(self.buckets)

    @classmethod
    def fit(cls, texts: Sequence[str], config: FeaturizerConfig) -> Featurizer:
        """Learn the known buckets and their IDF, log((1 + n) / (1 + df)) + 1, from training texts."""
        text_index, _, bucket, _ = hashed_counts(texts, config)
        per_text = np.unique(text_index * config.buckets + bucket)
        seen, df = np.unique(per_text % config.buckets, return_counts=True)
        if len(seen) > config.max_features:
            keep = np.lexsort((seen, -df))[: config.max_features]
            keep.sort()
            seen, df = seen[keep], df[keep]
        idf = np.log((1.0 + len(texts)) / (1.0 + df)) + 1.0
        return cls(config, seen, idf.astype(np.float32))

    def transform(self, texts: Sequence[str]) -> Bags:
        """Bags of the given texts; a text with no known n-gram gets an empty bag."""
        text_index, group, bucket, count = hashed_counts(texts, self.config)
        rows = np.searchsorted(self.buckets, bucket)
        known = rows < len(self.buckets)
        known[known] = self.buckets[rows[known]] == bucket[known]
        text_index, group, rows, count = text_index[known], group[known], rows[known], count[known]
        weights = (1.0 + np.log(count)) * self.idf[rows]
        segment = text_index * _GROUPS + group
        norms = np.sqrt(np.bincount(segment, weights=weights * weights, minlength=len(texts) * _GROUPS))
        weights = (weights / norms[segment]).astype(np.float32)
        offsets = np.searchsorted(text_index, np.arange(len(texts), dtype=np.int64)).astype(np.int64)
        return Bags(rows.astype(np.int64), weights, offsets)
