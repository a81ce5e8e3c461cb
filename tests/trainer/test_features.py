from __future__ import annotations

import functools
import json
import math
import operator
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer import features, ngrams
from trainer.features import Featurizer, FeaturizerConfig
from trainer.ngrams import tokenize

TEXTS = ["Book a table for two tonight!", "Play some jazz, please", "Wird es morgen in München regnen?"]


def _buckets_in_fresh_process() -> list[int]:
    code = (
        "import json, sys\n"
        "from trainer.features import Featurizer, FeaturizerConfig\n"
        f"print(json.dumps(Featurizer.fit({TEXTS!r}, FeaturizerConfig()).buckets.tolist()))\n"
    )
    env = {"PYTHONHASHSEED": "random", "PATH": ""}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout)


def test_hashing_is_identical_across_processes_with_random_hash_seeds() -> None:
    here = Featurizer.fit(TEXTS, FeaturizerConfig()).buckets.tolist()
    assert _buckets_in_fresh_process() == here
    assert _buckets_in_fresh_process() == here


def test_tokenize_lowercases_and_normalises() -> None:
    assert tokenize("Ｐlay  JAZZ, please!") == (["play", "jazz", "please"], ["play", "jazz", "please"])


def test_bags_are_l2_normalised_per_group_and_drop_unknown_ngrams() -> None:
    featurizer = Featurizer.fit(TEXTS, FeaturizerConfig())
    bags = featurizer.transform(["play jazz", "ÿÿÿ"])
    ends = np.append(bags.offsets[1:], len(bags.ids))
    first = bags.weights[bags.offsets[0] : ends[0]]
    # a word group and a char group, each of unit norm
    assert np.isclose(float(np.sum(first * first)), 2.0, atol=1e-5)
    assert ends[1] == bags.offsets[1]  # nothing of "ÿÿÿ" was seen in training


def test_select_gathers_bags_in_the_requested_order() -> None:
    featurizer = Featurizer.fit(TEXTS, FeaturizerConfig())
    bags = featurizer.transform(TEXTS)
    picked = bags.select(np.array([2, 0]))
    again = featurizer.transform([TEXTS[2], TEXTS[0]])
    assert np.array_equal(picked.ids, again.ids)
    assert np.array_equal(picked.offsets, again.offsets)
    assert np.allclose(picked.weights, again.weights)


@pytest.mark.parametrize(("start", "stop"), [(0, 4), (1, 3), (3, 4), (0, 1)])
def test_slice_is_the_select_of_a_range_without_a_copy(start: int, stop: int) -> None:
    bags = Featurizer.fit(TEXTS, FeaturizerConfig()).transform([*TEXTS, ""])  # the last bag empty

    sliced, selected = bags.slice(start, stop), bags.select(np.arange(start, stop))

    for field in ("ids", "offsets", "weights"):
        assert np.array_equal(getattr(sliced, field), getattr(selected, field)), field
    assert np.shares_memory(sliced.ids, bags.ids) or len(sliced.ids) == 0


def _bucket_counts(text: str, config: FeaturizerConfig) -> list[Counter[int]]:
    """Per group (word n-grams, then character n-grams), each bucket's count in ``text``, by
    the definition: every n-gram hashed on its own."""
    words, tokens = tokenize(text)
    char_grams = [
        gram
        for token in tokens
        for gram in ngrams.char_grams(token, config.char_ngram_min, config.char_ngram_max)
    ]
    groups = (ngrams.word_grams(words, config.word_ngrams), char_grams)
    return [
        Counter(ngrams.stable_hash(gram, group) % config.buckets for gram in grams)
        for group, grams in enumerate(groups)
    ]


DF_TEXTS = [*TEXTS, "play play jazz", "jazz tonight", "", "book book", "日本語の文 and ٱلْعَرَبِيَّة", "x" * 300]
DF_TEXTS *= 3


@pytest.mark.parametrize("cache_limit", [1 << 20, 0], ids=["cached", "emptied-every-chunk"])
def test_fit_counts_document_frequency_the_same_in_any_chunking(
    monkeypatch: pytest.MonkeyPatch, cache_limit: int
) -> None:
    config = FeaturizerConfig()
    # df by definition: the texts holding each bucket, in either group
    reference = Counter(b for text in DF_TEXTS for b in set().union(*_bucket_counts(text, config)))
    monkeypatch.setattr(features, "_FIT_CACHE_LIMIT", cache_limit)
    for chunk in (1, 2, 7, 1000):
        monkeypatch.setattr(features, "_FIT_CHUNK", chunk)
        featurizer = Featurizer.fit(DF_TEXTS, config)
        assert featurizer.buckets.tolist() == sorted(reference)
        df = np.array([reference[b] for b in featurizer.buckets.tolist()])
        assert np.allclose(featurizer.idf, np.log((1 + len(DF_TEXTS)) / (1 + df)) + 1)


def test_transform_gives_the_same_bags_in_any_chunking(monkeypatch: pytest.MonkeyPatch) -> None:
    featurizer = Featurizer.fit(TEXTS, FeaturizerConfig())
    texts = ["", *TEXTS, "ÿÿÿ", "play jazz", ""]
    whole = featurizer.transform(texts)
    for chunk in (1, 2, 3):
        monkeypatch.setattr(features, "_CHUNK", chunk)
        chunked = featurizer.transform(texts)
        assert np.array_equal(chunked.ids, whole.ids)
        assert np.array_equal(chunked.weights, whole.weights)
        assert np.array_equal(chunked.offsets, whole.offsets)
    assert len(featurizer.transform([])) == 0


def _reference_vector(featurizer: Featurizer, text: str, table: np.ndarray) -> np.ndarray:
    """A text's bag summed over ``table``, straight from the definition: sublinear TF x IDF, L2 per group."""
    total = np.zeros(table.shape[1])
    for counts in _bucket_counts(text, featurizer.config):
        bucket = np.array(list(counts), dtype=np.int64)
        count = np.array(list(counts.values()), dtype=np.float64)
        rows = np.searchsorted(featurizer.buckets, bucket)
        known = rows < featurizer.rows
        known[known] = featurizer.buckets[rows[known]] == bucket[known]
        weights = (1 + np.log(count[known])) * featurizer.idf[rows[known]]
        if len(weights):
            total += (weights / np.linalg.norm(weights)) @ table[rows[known]]
    return total


def test_batched_transform_equals_the_definition_text_by_text() -> None:
    featurizer = Featurizer.fit(TEXTS, FeaturizerConfig())
    table = np.random.default_rng(0).normal(size=(featurizer.rows, 4))
    texts = [*TEXTS, "play play play jazz", "", "ÿÿÿ", "book a table for two tonight"]
    bags = featurizer.transform(texts)
    ends = np.append(bags.offsets[1:], len(bags.ids))
    for i, text in enumerate(texts):
        ids, weights = bags.ids[bags.offsets[i] : ends[i]], bags.weights[bags.offsets[i] : ends[i]]
        assert np.allclose(weights @ table[ids], _reference_vector(featurizer, text, table), atol=1e-5)


def test_the_n_gram_caches_stay_bounded_and_do_not_change_results(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(features, "_CACHE_LIMIT", 4)
    featurizer = Featurizer.fit(TEXTS, FeaturizerConfig())
    bags = featurizer.transform(TEXTS * 3)
    assert len(featurizer._word_rows) <= 4 and len(featurizer._char_rows) <= 4
    fresh = Featurizer(featurizer.config, featurizer.buckets, featurizer.idf).transform(TEXTS * 3)
    assert np.array_equal(bags.ids, fresh.ids) and np.array_equal(bags.weights, fresh.weights)


# The definition of transform, text by text and n-gram by n-gram, against which the batched,
# cached implementation must agree bit for bit.

CORPUS = [
    "Book a table for two tonight at the Italian place",
    "play some jazz, play the jazz playlist please",
    "Wird es morgen in München regnen? Straße, Größe",
    "ΣΟΦΙΑΣ ΟΔΟΣ: σοφίας οδός",
    "明日の天気を教えて、東京は晴れるかな",
    "今天北京的天气怎么样",
    "내일 서울 날씨 어때요",
    "مَدْرَسَةٌ جَمِيلَةٌ في المدينة، مـدرسـة",
    "ＦＵＬＬ　ｗｉｄｔｈ ﬁne ①② café cafe\u0301",
    "add the song to my playlist ストリーミング playlist_2024",
]
CONFIGS = [
    FeaturizerConfig(),
    FeaturizerConfig(word_ngrams=3, char_ngram_min=1, char_ngram_max=3),
    FeaturizerConfig(word_ngrams=1, char_ngram_min=3, char_ngram_max=6, buckets=1 << 10, max_features=300),
    FeaturizerConfig(word_ngrams=0, char_ngram_min=4, char_ngram_max=4),
]
# one-character oddities: separators, final sigma, case and compatibility folds, jamo, combining
# marks, Arabic marks and tatweel, variation selectors, CJK marks, an astral ideograph, ZWJ
_ODD_CHARS = "\x00\n\t_Σςİßﬁ\uff21①ᄀ\u1161\u0301\u0640\u064e\u0651\u0670\ufe0f\U000e0100ㄱ〆ー𠀀\u200d"
_ODD = ["", " ", "...", "42", "ΑΣ", "ｶﾞ", *_ODD_CHARS]
_ALPHABET = st.sampled_from([*"aZ9_ -,.!?'éÖñΣσςΑ日本語東京漢字かなカナー한국어ㄱᄀمرحبا", *_ODD_CHARS])
_PIECE = st.one_of(
    st.sampled_from([word for text in CORPUS for word in text.split()]),
    st.sampled_from(_ODD),
    st.text(_ALPHABET, max_size=6),
    st.text(max_size=6),
)
_TEXT = st.builds(
    str.join, st.sampled_from([" ", "", ", ", "\x00", " \u064e"]), st.lists(_PIECE, max_size=12)
)
_BATCH = st.lists(_TEXT, max_size=8)


@functools.cache
def _fitted(config: FeaturizerConfig) -> Featurizer:
    return Featurizer.fit(CORPUS, config)


def _cold(config: FeaturizerConfig) -> Featurizer:
    """The fitted featurizer, with empty caches."""
    fitted = _fitted(config)
    return Featurizer(config, fitted.buckets, fitted.idf)


def _reference_bags(featurizer: Featurizer, texts: list[str]) -> features.Bags:
    """The bags by the definition: per text and group, the known rows in order, weighted by
    sublinear TF x IDF and divided by their L2 norm (summed in row order, as bincount does)."""
    ids: list[int] = []
    weights: list[np.float32] = []
    offsets: list[int] = []
    for text in texts:
        offsets.append(len(ids))
        for bucket_counts in _bucket_counts(text, featurizer.config):
            counts: Counter[int] = Counter()
            for bucket, count in bucket_counts.items():
                row = int(np.searchsorted(featurizer.buckets, bucket))
                if row < featurizer.rows and featurizer.buckets[row] == bucket:
                    counts[row] += count
            rows = sorted(counts)
            tf = 1.0 + np.log(np.array([counts[row] for row in rows], dtype=np.int64))
            tf_idf = tf * featurizer.idf[rows]
            norm = math.sqrt(functools.reduce(operator.add, (w * w for w in tf_idf.tolist()), 0.0))
            ids += rows
            weights += list((tf_idf / norm).astype(np.float32))
    return features.Bags(
        np.array(ids, dtype=np.int64), np.array(weights, dtype=np.float32), np.array(offsets, dtype=np.int64)
    )


def _assert_identical(bags: features.Bags, expected: features.Bags) -> None:
    for got, want in zip(
        (bags.ids, bags.weights, bags.offsets),
        (expected.ids, expected.weights, expected.offsets),
        strict=True,
    ):
        assert got.dtype == want.dtype
        assert got.tobytes() == want.tobytes()


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(CONFIGS), _BATCH)
def test_transform_equals_the_reference_bit_for_bit_with_cold_and_warm_caches(
    config: FeaturizerConfig, texts: list[str]
) -> None:
    featurizer = _cold(config)
    expected = _reference_bags(featurizer, texts)
    _assert_identical(featurizer.transform(texts), expected)
    _assert_identical(featurizer.transform(texts), expected)  # from the caches
    _assert_identical(featurizer.transform(texts[::-1]), _reference_bags(featurizer, texts[::-1]))


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from(CONFIGS), st.lists(_BATCH, min_size=1, max_size=4), st.integers(1, 12), st.integers(1, 3)
)
def test_transform_equals_the_reference_while_the_caches_fill_and_empty(
    config: FeaturizerConfig, batches: list[list[str]], limit: int, chunk: int
) -> None:
    featurizer = _cold(config)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(features, "_CACHE_LIMIT", limit)
        patch.setattr(features, "_CHUNK", chunk)
        for texts in [*batches, *batches]:
            _assert_identical(featurizer.transform(texts), _reference_bags(featurizer, texts))
            assert len(featurizer._word_rows) <= limit and len(featurizer._char_rows) <= limit


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(st.sampled_from(CONFIGS), _BATCH, st.integers(1, 3), st.sampled_from([1 << 20, 0]))
def test_fit_transform_fits_as_fit_and_bags_as_transform_in_any_chunking(
    config: FeaturizerConfig, texts: list[str], chunk: int, cache_limit: int
) -> None:
    training = [*CORPUS, *texts]  # config 3's 300 features leave some n-grams unknown
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(features, "_FIT_CHUNK", chunk)
        patch.setattr(features, "_FIT_CACHE_LIMIT", cache_limit)
        featurizer, bags = Featurizer.fit_transform(training, config)
    fitted = Featurizer.fit(training, config)
    assert featurizer.buckets.tobytes() == fitted.buckets.tobytes()
    assert featurizer.idf.tobytes() == fitted.idf.tobytes()
    _assert_identical(bags, _reference_bags(featurizer, training))
    _assert_identical(bags, fitted.transform(training))


@given(_BATCH)
def test_a_batch_tokenises_as_its_texts_one_by_one(texts: list[str]) -> None:
    assert ngrams.tokenize_all(texts) == [tokenize(text) for text in texts]


def test_batch_tokenising_keeps_final_sigma_and_marks_at_the_text_boundaries() -> None:
    texts = ["ΟΔΟΣ", "Σοφία", "\u0301e", "مَ", "ｶ", "\uff9e", "ΑΣ\x00Σ"]
    assert ngrams.tokenize_all(texts) == [tokenize(text) for text in texts]
    assert ngrams.tokenize_all(texts)[0][0] == ["οδος"]


def test_latin1_text_is_cut_into_the_runs_the_regular_expression_finds() -> None:
    text = "".join(f"a{chr(code)}b{chr(code)}{chr(code)} " for code in range(256))
    runs = ngrams._RUN.findall(text)
    assert ngrams._split(text) == (runs, runs)


@given(st.lists(st.text(_ALPHABET, min_size=1, max_size=3), max_size=8), st.integers(0, 4))
def test_word_grams_are_the_runs_of_1_to_n_words(words: list[str], n: int) -> None:
    expected = [" ".join(words[i : i + k]) for k in range(1, n + 1) for i in range(len(words) - k + 1)]
    assert ngrams.word_grams(words, n) == expected


def test_a_transform_survives_another_thread_emptying_the_caches_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the serving threads share one model; here the "other thread" empties both caches between the
    # look-up of the missing word n-grams and that of the missing tokens
    featurizer = _cold(FeaturizerConfig())
    compute = featurizer._token_char_rows

    def compute_while_the_caches_empty(tokens: list[str]) -> list[bytes]:
        featurizer._word_rows.clear()
        featurizer._char_rows.clear()
        return compute(tokens)

    monkeypatch.setattr(featurizer, "_token_char_rows", compute_while_the_caches_empty)
    _assert_identical(featurizer.transform(CORPUS), _reference_bags(featurizer, CORPUS))
