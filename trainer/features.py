"""Text to hashed n-gram bags, fastText-style, with TF-IDF weights.

Each text becomes two groups of features: word n-grams (1..word_ngrams) and character
n-grams (char_ngram_min..char_ngram_max) of each token padded as ``<token>`` (word-boundary
aware, like scikit-learn's ``char_wb``). Every n-gram is hashed with CRC-32 (stable across
processes and machines, unlike Python's ``hash()``) into ``buckets`` ids. What a word and a
token are, in every script, and the n-grams and their hashes are trainer.ngrams'.

Fitting keeps the buckets seen in training (at most ``max_features``, most frequent first)
and gives each a row of the embedding table and a smoothed IDF. A text's bag holds the rows
of its known n-grams weighted by sublinear TF x IDF, L2-normalised per group; n-grams never
seen in training are dropped, as a vectoriser fitted on the training data drops them. A
training job gets its training texts' bags with the fit (``fit_transform``), from the buckets
the fit hashed, rather than hashing every text again.

Transforming is on the serving path (one text per request, or a collection of them, and
calls arriving together are batched; a budget of about 0.1 ms a request), so it works on the
whole batch at once. The batch is normalised as one string, joined by a separator that NFKC
and lower-casing neither change nor merge with a neighbour, and Latin-1 text is cut into runs
by a byte translation table instead of the regular expression. Each distinct word n-gram,
and each distinct token's character n-grams, is hashed once, and the embedding rows found
are kept as int32 bytes in two bounded caches: a text's rows are two ``bytes.join`` of cache
look-ups, and whatever the caches lack is hashed for the whole batch and found in one numpy
search. Counting, weighting and normalising are a few numpy operations over the whole batch
(one stable sort of (text, group, row) keys), not per n-gram Python.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from itertools import pairwise

import numpy as np

from trainer.ngrams import char_grams, stable_hash, tokenize_all, word_grams

_GROUPS = 2  # 0: word n-grams, 1: character n-grams
# Entries per cache; a cache that would outgrow it is emptied, so unseen input cannot grow it.
# Both full of random tokens hold about 10 MB per loaded model (5 MB at 1 << 14, which thrashed
# on a snips-sized vocabulary: 2.5x slower).
_CACHE_LIMIT = 1 << 15
# Each cache's bytes are bounded too (Featurizer.cache_bytes): an entry of a 2,000-letter
# token holds its thousands of n-grams' rows, and 32,768 of them took 0.67 GB.
DEFAULT_CACHE_BYTES = 8 << 20
_ENTRY_OVERHEAD = 120  # bytes of a dict slot and the key's and value's object headers
_ROW_BYTES = 4  # rows travel as int32 bytes
# Texts whose n-grams are looked up and bagged (transform) or counted (fit) at once; their
# n-gram strings are held meanwhile, and a text of one 1,000-letter word has 4,000 of them:
# at 1,024 texts a chunk, transforming 2,048 such texts peaked 190 MB higher (and no faster).
_CHUNK = 256
_FIT_CHUNK = 64  # texts fit counts at once: 2,000 texts of one 1,000-letter word peak 135 MB higher
# n-gram hashes fit keeps across its chunks (int64 each: 8 MB), then empties
_FIT_CACHE_LIMIT = 1 << 20


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

    def slice(self, start: int, stop: int) -> Bags:
        """Bags ``start`` to ``stop - 1`` as views of these (no copy), offsets from 0."""
        first = int(self.offsets[start])
        end = int(self.offsets[stop]) if stop < len(self.offsets) else len(self.ids)
        return Bags(self.ids[first:end], self.weights[first:end], self.offsets[start:stop] - first)


@dataclass(frozen=True)
class _ChunkBuckets:
    """The n-gram buckets of a chunk of texts, in segments: segment 2 * text + group holds
    ``lengths[segment]`` consecutive entries of ``buckets``."""

    lengths: np.ndarray
    buckets: np.ndarray

    def segments(self) -> np.ndarray:
        """The segment of every entry of ``buckets``."""
        return np.repeat(np.arange(len(self.lengths), dtype=np.int64), self.lengths)

    def compact(self, buckets: int) -> _ChunkBuckets:
        """The same in the smallest unsigned type that holds bucket ``buckets`` - 1 (2^24
        buckets: 4 bytes, half of int64; this is what waits in fit_transform for the bags)."""
        return _ChunkBuckets(self.lengths, self.buckets.astype(np.min_scalar_type(buckets - 1)))


@dataclass
class _FitHashes:
    """The hashes fit keeps across its chunks of texts: word n-gram -> bucket, and token -> its
    character n-grams' buckets (tokens repeat far more than texts do). Emptied once they hold
    _FIT_CACHE_LIMIT n-grams, so that a corpus of distinct long tokens cannot grow them."""

    words: dict[str, int] = field(default_factory=dict)
    tokens: dict[str, np.ndarray] = field(default_factory=dict)
    size: int = 0

    def buckets(self, texts: Sequence[str], config: FeaturizerConfig) -> _ChunkBuckets:
        """The bucket of every n-gram of every text, repeats included: word n-grams hashed in
        group 0, character n-grams in group 1. A token's n-grams are held as strings only while
        it is hashed."""
        if self.size > _FIT_CACHE_LIMIT:
            self.words.clear()
            self.tokens.clear()
            self.size = 0
        tokenized = tokenize_all(texts)
        text_grams = [word_grams(words, config.word_ngrams) for words, _ in tokenized]
        for gram in dict.fromkeys(gram for grams in text_grams for gram in grams):
            if gram not in self.words:
                self.words[gram] = stable_hash(gram, 0) % config.buckets
                self.size += 1
        parts: list[np.ndarray] = []
        lengths: list[int] = []
        for grams, (_, tokens) in zip(text_grams, tokenized, strict=True):
            words = np.fromiter(map(self.words.__getitem__, grams), dtype=np.int64, count=len(grams))
            chars = list(map(partial(self._token_buckets, config=config), tokens))
            parts += [words, *chars]
            lengths += (len(grams), sum(map(len, chars)))
        return _ChunkBuckets(np.asarray(lengths, dtype=np.int64), np.concatenate(parts))

    def _token_buckets(self, token: str, config: FeaturizerConfig) -> np.ndarray:
        buckets = self.tokens.get(token)
        if buckets is None:
            grams = char_grams(token, config.char_ngram_min, config.char_ngram_max)
            hashes = np.fromiter((stable_hash(gram, 1) for gram in grams), dtype=np.int64, count=len(grams))
            buckets = self.tokens[token] = hashes % config.buckets
            self.size += len(grams)
        return buckets


def _document_frequency(
    text_index: np.ndarray, bucket: np.ndarray, buckets: int
) -> tuple[np.ndarray, np.ndarray]:
    """The buckets present and how many texts hold each, from fit's (text, bucket) pairs: two sorts
    (``np.add.at`` on the 16 M-bucket table was ten times slower)."""
    keys = text_index * buckets + bucket
    keys.sort()
    present = _run_starts(keys)
    held = keys[present] % buckets  # each (text, bucket) once
    held.sort()
    starts = _run_starts(held)
    return held[starts], np.diff(np.append(starts, len(held)))


def _run_starts(ordered: np.ndarray) -> np.ndarray:
    """Where each run of equal values of a sorted array starts."""
    change = np.empty(len(ordered), dtype=bool)
    change[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=change[1:])
    return np.flatnonzero(change)


class Featurizer:
    """Maps texts to TF-IDF-weighted bags over the embedding rows known from training."""

    def __init__(self, config: FeaturizerConfig, buckets: np.ndarray, idf: np.ndarray) -> None:
        self.config = config
        self.buckets = np.asarray(buckets, dtype=np.int64)  # sorted; row i <-> buckets[i]
        self.idf = np.asarray(idf, dtype=np.float32)
        self._word_rows = _RowCache()  # word n-gram -> its row as int32 bytes, b"" unknown
        self._char_rows = _RowCache()  # token -> int32 bytes of its known char n-grams' rows
        # the most each cache holds, about (what a model's weights are counted with, serving)
        self.cache_bytes = DEFAULT_CACHE_BYTES

    @property
    def rows(self) -> int:
        """Rows of the embedding table this featurizer addresses."""
        return len(self.buckets)

    @classmethod
    def fit(cls, texts: Sequence[str], config: FeaturizerConfig) -> Featurizer:
        """Learn the known buckets and their IDF, log((1 + n) / (1 + df)) + 1, from training texts."""
        return cls._fit(texts, config, keep=False)[0]

    @classmethod
    def fit_transform(cls, texts: Sequence[str], config: FeaturizerConfig) -> tuple[Featurizer, Bags]:
        """``fit`` and the bags of the same texts, bit for bit those ``transform`` gives, made from
        the buckets fit hashed instead of tokenising and hashing every text again: a training job
        needs both, and the second pass took as long as the fit (0.6 s of snips' 13,784 texts)."""
        featurizer, kept, table = cls._fit(texts, config, keep=True)
        # the document frequencies' table, one entry per bucket, becomes bucket -> row (-1: not
        # kept): a gather, where a binary search of the kept buckets took twice the bags' time
        table.fill(-1)
        table[featurizer.buckets] = np.arange(featurizer.rows, dtype=table.dtype)
        chunks = deque(kept)  # each chunk's buckets are let go once its bags are made
        del kept
        return featurizer, _concatenate(
            [featurizer._bags_of_buckets(chunks.popleft(), table) for _ in range(len(chunks))]
        )

    @classmethod
    def _fit(
        cls, texts: Sequence[str], config: FeaturizerConfig, keep: bool
    ) -> tuple[Featurizer, list[_ChunkBuckets], np.ndarray]:
        """The fitted featurizer, each chunk's buckets when ``keep`` (4 bytes an n-gram), and the
        table of document frequencies (int32, one entry per bucket), free for reuse."""
        # document frequency per bucket, counted a chunk of texts at a time: the n-grams of all
        # texts at once, as Python objects, took 630 MB for 2,000 texts of one 1,000-letter word
        df = np.zeros(config.buckets, dtype=np.int32)
        hashes = _FitHashes()
        kept: list[_ChunkBuckets] = []
        for start in range(0, len(texts), _FIT_CHUNK):
            chunk = hashes.buckets(texts[start : start + _FIT_CHUNK], config)
            present, count = _document_frequency(chunk.segments() // _GROUPS, chunk.buckets, config.buckets)
            df[present] += count
            if keep:
                kept.append(chunk.compact(config.buckets))
        return cls.of_document_frequency(df, len(texts), config), kept, df

    @classmethod
    def of_document_frequency(cls, df: np.ndarray, texts: int, config: FeaturizerConfig) -> Featurizer:
        """The featurizer of ``texts`` training texts whose buckets' document frequencies are
        ``df`` (one entry per bucket): the ``max_features`` most frequent buckets, ties to the
        lower bucket, with their IDF."""
        seen = np.flatnonzero(df)
        df = df[seen]
        if len(seen) > config.max_features:
            keep = np.lexsort((seen, -df))[: config.max_features]
            keep.sort()
            seen, df = seen[keep], df[keep]
        idf = np.log((1.0 + texts) / (1.0 + df)) + 1.0
        return cls(config, seen, idf.astype(np.float32))

    def transform(self, texts: Sequence[str]) -> Bags:
        """Bags of the given texts; a text with no known n-gram gets an empty bag.

        Within a bag the word group comes first, then the character group, each sorted by row.
        """
        starts = range(0, len(texts), _CHUNK)
        chunks = [self._bags(self._row_parts(texts[start : start + _CHUNK])) for start in starts]
        return chunks[0] if len(chunks) == 1 else _concatenate(chunks)

    def _row_parts(self, texts: Sequence[str]) -> list[bytes]:
        """For each text, the int32 bytes of its word group's rows, then of its character group's."""
        tokenized = tokenize_all(texts)
        try:
            return self._join_rows(tokenized, self._word_rows, self._char_rows)
        except KeyError:  # not all cached: look up every n-gram and token the caches lack at once
            grams = [gram for words, _ in tokenized for gram in word_grams(words, self.config.word_ngrams)]
            tokens = [token for _, text_tokens in tokenized for token in text_tokens]
            word_rows = _lookup(self._word_rows, grams, self._word_gram_rows, self.cache_bytes)
            char_rows = _lookup(self._char_rows, tokens, self._token_char_rows, self.cache_bytes)
            return self._join_rows(tokenized, word_rows, char_rows)

    def _join_rows(
        self,
        tokenized: list[tuple[list[str], list[str]]],
        word_rows: dict[str, bytes],
        char_rows: dict[str, bytes],
    ) -> list[bytes]:
        """Each text's rows of word n-grams, then of character n-grams, from the given dicts of rows
        (KeyError: an n-gram or token is not in them)."""
        parts: list[bytes] = []
        for words, tokens in tokenized:
            parts += (
                b"".join(map(word_rows.__getitem__, word_grams(words, self.config.word_ngrams))),
                b"".join(map(char_rows.__getitem__, tokens)),
            )
        return parts

    def _bags(self, parts: list[bytes]) -> Bags:
        """Bags from _row_parts: part 2 * text + group holds the rows of that group's n-grams."""
        lengths = [len(part) // _ROW_BYTES for part in parts]
        keys = np.repeat(np.arange(0, len(parts) << 32, 1 << 32, dtype=np.int64), lengths)
        keys |= np.frombuffer(b"".join(parts), dtype=np.int32)
        return self._bags_of_keys(keys, len(parts))

    def _bags_of_buckets(self, chunk: _ChunkBuckets, row_of: np.ndarray) -> Bags:
        """Bags from fit's buckets of a chunk of texts (``row_of``: each bucket's row, -1 for
        one not kept): their known rows, as _bags's keys."""
        rows = row_of[chunk.buckets]
        known = rows >= 0
        keys = (chunk.segments()[known] << 32) | rows[known]
        return self._bags_of_keys(keys, len(chunk.lengths))

    def _bags_of_keys(self, keys: np.ndarray, segments: int) -> Bags:
        """Bags of ``segments`` // 2 texts from one int64 key per (text, group, row) occurrence,
        segment << 32 | row with segment = text * 2 + group: one sort counts, groups and orders
        the whole batch. The stable sort (timsort) makes use of the sorted runs of rows that the
        token cache holds."""
        keys.sort(kind="stable")
        starts = _run_starts(keys)
        bounds = np.append(starts, len(keys))
        distinct = keys[starts]
        segment, rows = distinct >> 32, distinct & 0xFFFFFFFF
        weights = (1.0 + np.log(bounds[1:] - starts)) * self.idf[rows]
        norms = np.sqrt(np.bincount(segment, weights=weights * weights, minlength=segments))
        weights = (weights / norms[segment]).astype(np.float32)
        offsets = np.searchsorted(segment, np.arange(0, segments, _GROUPS, dtype=np.int64))
        return Bags(rows, weights, offsets)

    def _rows_of(self, hashes: Sequence[int]) -> np.ndarray:
        """Embedding rows of CRC-32 hashes, -1 for buckets unseen in training."""
        bucket = np.asarray(hashes, dtype=np.int64) % self.config.buckets
        rows = np.searchsorted(self.buckets, bucket)
        known = rows < len(self.buckets)
        known[known] = self.buckets[rows[known]] == bucket[known]
        return np.where(known, rows, -1)

    def _word_gram_rows(self, grams: list[str]) -> list[bytes]:
        """Per word n-gram, its row as int32 bytes (b"" when unseen in training)."""
        return _known_rows(self._rows_of([stable_hash(gram, 0) for gram in grams]), [1] * len(grams))

    def _token_char_rows(self, tokens: list[str]) -> list[bytes]:
        """Per token, the sorted rows of its character n-grams seen in training, as int32 bytes."""
        grams = [
            char_grams(token, self.config.char_ngram_min, self.config.char_ngram_max) for token in tokens
        ]
        lengths = list(map(len, grams))
        rows = self._rows_of([stable_hash(gram, 1) for token_grams in grams for gram in token_grams])
        # sorted runs of rows, which the stable sort in _bags merges quickly
        rows = rows[np.lexsort((rows, np.repeat(np.arange(len(tokens)), lengths)))]
        return _known_rows(rows, lengths)


def _concatenate(chunks: list[Bags]) -> Bags:
    """One Bags of the chunks' texts in order (none: an empty one). Bags are made a chunk at a
    time because _bags's sort keys and temporaries take about 60 bytes an n-gram: for 10,000
    texts of 2,000 known n-grams each, 1.4 GB at once."""
    if not chunks:
        return Bags(np.empty(0, np.int64), np.empty(0, np.float32), np.empty(0, np.int64))
    starts = np.cumsum([0] + [len(chunk.ids) for chunk in chunks[:-1]])
    return Bags(
        np.concatenate([chunk.ids for chunk in chunks]),
        np.concatenate([chunk.weights for chunk in chunks]),
        np.concatenate([chunk.offsets + start for chunk, start in zip(chunks, starts, strict=True)]),
    )


def _known_rows(rows: np.ndarray, lengths: list[int]) -> list[bytes]:
    """The known (>= 0) rows of each consecutive run of the given lengths, as int32 bytes."""
    known = rows >= 0
    data = rows[known].astype(np.int32).tobytes()  # rows < max_features: exact, and half the size
    ends = np.concatenate(([0], np.cumsum(known)))[np.concatenate(([0], np.cumsum(lengths)))]
    cuts = (ends * _ROW_BYTES).tolist()
    return [data[a:b] for a, b in pairwise(cuts)]


class _RowCache(dict[str, bytes]):
    """A featurizer's cache of rows, with the bytes its entries hold (about: see _entry_bytes)."""

    held = 0

    def clear(self) -> None:
        super().clear()
        self.held = 0


def _entry_bytes(key: str, rows: bytes) -> int:
    return len(key) * (1 if key.isascii() else 4) + len(rows) + _ENTRY_OVERHEAD


def _lookup(
    cache: _RowCache, keys: list[str], compute: Callable[[list[str]], list[bytes]], max_bytes: int
) -> dict[str, bytes]:
    """The rows of every key, as a dict of their own (serving threads share the cache, and another
    may empty it meanwhile): the cache's, and the others computed in one call and cached. A cache
    that would outgrow _CACHE_LIMIT entries or ``max_bytes`` is emptied first; more new keys than
    it holds are not kept."""
    found: dict[str, bytes] = {}
    missing: list[str] = []
    for key in dict.fromkeys(keys):  # each key once
        rows = cache.get(key)
        if rows is None:
            missing.append(key)
        else:
            found[key] = rows
    if not missing:
        return found
    computed = dict(zip(missing, compute(missing), strict=True))
    added = sum(_entry_bytes(key, rows) for key, rows in computed.items())
    if len(cache) + len(computed) > _CACHE_LIMIT or cache.held + added > max_bytes:
        cache.clear()
    if len(computed) <= _CACHE_LIMIT and added <= max_bytes:
        cache.update(computed)
        cache.held += added
    found.update(computed)
    return found
