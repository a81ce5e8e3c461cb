"""Text to hashed n-gram bags, fastText-style, with TF-IDF weights.

Each text becomes two groups of features: word n-grams (1..word_ngrams) and character
n-grams (char_ngram_min..char_ngram_max) of each token padded as ``<token>`` (word-boundary
aware, like scikit-learn's ``char_wb``). Every n-gram is hashed with CRC-32 (stable across
processes and machines, unlike Python's ``hash()``) into ``buckets`` ids.

Words and tokens are runs of letters, digits and underscores in the lower-cased NFKC text,
one pipeline for every language, without a language switch. The scripts written without
spaces between words (Han and kana; hangul too, whose spacing varies from writer to writer)
have no words to find: there each character is a word, so word 1..2-grams are character
uni- and bigrams, the usual features of unsegmented text, and a whole run is one token.
Elsewhere words and tokens are the same runs. Arabic's optional vowel marks and tatweel are
dropped, so vocalised and bare spellings are one word, and so are variation selectors.

Fitting keeps the buckets seen in training (at most ``max_features``, most frequent first)
and gives each a row of the embedding table and a smoothed IDF. A text's bag holds the rows
of its known n-grams weighted by sublinear TF x IDF, L2-normalised per group; n-grams never
seen in training are dropped, as a vectoriser fitted on the training data drops them.

Transforming is on the serving path (one text per request, a budget of about 0.1 ms), so
it hashes each distinct word n-gram and each distinct token's character n-grams once and
keeps their embedding rows in two bounded caches; counting, weighting and normalising
are a few numpy operations over the whole batch, not per n-gram Python.
"""

from __future__ import annotations

import re
import unicodedata
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

# Letters and digits of the scripts written without spaces between words: Hangul Jamo, CJK
# iteration marks and numerals, kana, Bopomofo, Hangul syllables, CJK ideographs (NFKC has
# already folded half-width and compatibility forms into these).
_UNSEGMENTED = (
    "\u1100-\u11ff\u3005-\u3007\u3021-\u3029\u3031-\u3035\u3038-\u303c\u3041-\u3096"
    "\u309d-\u309f\u30a1-\u30fa\u30fc-\u30ff\u3105-\u312f\u31a0-\u31bf\u31f0-\u31ff"
    "\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97c\uac00-\ud7a3\ud7b0-\ud7fb\uf900-\ufaff"
    "\U0001b000-\U0001b16f\U00020000-\U000323af"
)
_UNSEGMENTED_CHAR = re.compile(f"[{_UNSEGMENTED}]")
# Words and tokens are runs of word characters (\w). With those scripts in a text, tokens (the
# units of character n-grams) are cut where they begin and end, and each of their characters
# is a word (a unit of word n-grams); the slower pattern runs only on such texts.
_RUN = re.compile(r"\w+")
_TOKEN = re.compile(f"[{_UNSEGMENTED}]+|[^\\W{_UNSEGMENTED}]+")
# Dropped before tokenising: Arabic harakat (tanwin, short vowels, shadda, sukun, ...),
# superscript alef and tatweel, written or left out at the writer's whim, and variation
# selectors, which choose a glyph; for \w either would split a word in two.
_DROPPED = re.compile("[\u0640\u064b-\u065f\u0670\ufe00-\ufe0f\U000e0100-\U000e01ef]")
_GROUPS = 2  # 0: word n-grams, 1: character n-grams
# Entries per cache; a full cache is emptied, so unseen input cannot grow it. Both full of
# random tokens hold about 10 MB per loaded model (5 MB at 1 << 14, which thrashed on a
# snips-sized vocabulary: 2.5x slower).
_CACHE_LIMIT = 1 << 15
_NO_ROWS = np.zeros(0, dtype=np.int32)


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


def tokenize(text: str) -> tuple[list[str], list[str]]:
    """A text's words (for word n-grams) and tokens (for character n-grams): lower-cased NFKC
    runs of letters, digits and underscores, which are both, except that a run of Han, kana or
    hangul is a token of its own and each of its characters a word. Arabic's optional vowel
    marks and tatweel, and variation selectors, are dropped."""
    folded = unicodedata.normalize("NFKC", text).lower()
    if not folded.isascii():
        folded = _DROPPED.sub("", folded)
        if _UNSEGMENTED_CHAR.search(folded):
            tokens = _TOKEN.findall(folded)
            words: list[str] = []
            for token in tokens:
                if _UNSEGMENTED_CHAR.match(token):
                    words.extend(token)
                else:
                    words.append(token)
            return words, tokens
    runs = _RUN.findall(folded)
    return runs, runs


def stable_hash(gram: str, group: int) -> int:
    """CRC-32 of the group tag and the UTF-8 n-gram: identical in every process."""
    return zlib.crc32(gram.encode("utf-8"), group + 1)


def _word_grams(words: list[str], config: FeaturizerConfig) -> list[str]:
    grams = words[:] if config.word_ngrams >= 1 else []  # unigrams need no join
    for n in range(2, config.word_ngrams + 1):
        grams += [" ".join(words[i : i + n]) for i in range(len(words) - n + 1)]
    return grams


def _char_grams(token: str, config: FeaturizerConfig) -> list[str]:
    padded = f"<{token}>"
    return [
        padded[i : i + n]
        for n in range(config.char_ngram_min, config.char_ngram_max + 1)
        for i in range(len(padded) - n + 1)
    ]


def _grams(text: str, config: FeaturizerConfig) -> tuple[Counter[str], Counter[str]]:
    words, tokens = tokenize(text)
    chars: Counter[str] = Counter()
    for token in tokens:
        chars.update(_char_grams(token, config))
    return Counter(_word_grams(words, config)), chars


def hashed_counts(texts: Sequence[str], config: FeaturizerConfig) -> tuple[np.ndarray, ...]:
    """Flat (text index, group, bucket, count) arrays of every distinct n-gram of every text."""
    cache: dict[tuple[int, str], int] = {}
    text_index: list[int] = []
    group_of: list[int] = []
    bucket_of: list[int] = []
    count_of: list[int] = []
    for index, text in enumerate(texts):
        for group, counts in enumerate(_grams(text, config)):
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
        self._word_rows: dict[str, int] = {}  # word n-gram -> row, -1 when unknown
        self._char_rows: dict[str, np.ndarray] = {}  # token -> rows of its known char n-grams

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
        """Bags of the given texts; a text with no known n-gram gets an empty bag.

        Within a bag the word group comes first, then the character group, each sorted by row.
        """
        # Every (text, group, row) of the batch becomes one int64 key, segment * rows + row with
        # segment = text * 2 + group, so one sort counts, groups and orders the whole batch.
        width = max(self.rows, 1)
        word_keys: list[int] = []
        char_parts: list[np.ndarray] = [_NO_ROWS]
        char_bases: list[int] = [0]
        for index, text in enumerate(texts):
            words, tokens = tokenize(text)
            base = index * _GROUPS * width
            for gram in _word_grams(words, self.config):
                row = self._word_rows.get(gram)
                if row is None:
                    row = self._cache(self._word_rows, gram, int(self._rows_of([stable_hash(gram, 0)])[0]))
                if row >= 0:
                    word_keys.append(base + row)
            for token in tokens:
                rows = self._char_rows.get(token)
                if rows is None:
                    rows = self._cache(self._char_rows, token, self._known_char_rows(token))
                char_parts.append(rows)
                char_bases.append(base + width)
        lengths = np.fromiter(map(len, char_parts), dtype=np.int64, count=len(char_parts))
        char_keys = np.concatenate(char_parts) + np.repeat(np.asarray(char_bases, dtype=np.int64), lengths)
        keys = np.concatenate((np.asarray(word_keys, dtype=np.int64), char_keys))
        keys.sort()
        first = np.empty(len(keys), dtype=bool)
        first[:1] = True
        np.not_equal(keys[1:], keys[:-1], out=first[1:])
        starts = np.flatnonzero(first)
        count = np.diff(np.append(starts, len(keys)))
        segment, rows = np.divmod(keys[starts], width)
        weights = (1.0 + np.log(count)) * self.idf[rows]
        norms = np.sqrt(np.bincount(segment, weights=weights * weights, minlength=len(texts) * _GROUPS))
        weights = (weights / norms[segment]).astype(np.float32)
        offsets = np.searchsorted(segment, np.arange(0, len(texts) * _GROUPS, _GROUPS, dtype=np.int64))
        return Bags(rows, weights, offsets)

    def _rows_of(self, hashes: Sequence[int]) -> np.ndarray:
        """Embedding rows of CRC-32 hashes, -1 for buckets unseen in training."""
        bucket = np.asarray(hashes, dtype=np.int64) % self.config.buckets
        rows = np.searchsorted(self.buckets, bucket)
        known = rows < len(self.buckets)
        known[known] = self.buckets[rows[known]] == bucket[known]
        return np.where(known, rows, -1)

    def _known_char_rows(self, token: str) -> np.ndarray:
        rows = self._rows_of([stable_hash(gram, 1) for gram in _char_grams(token, self.config)])
        return rows[rows >= 0].astype(np.int32)  # rows < max_features: exact, and half the cache

    @staticmethod
    def _cache(cache: dict[str, Any], key: str, value: Any) -> Any:
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[key] = value
        return value
