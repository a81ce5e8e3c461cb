"""Featurisation speed: Featurizer.transform and Featurizer.fit against their earlier algorithms.

    python benchmarks/featurize_bench.py [DATASET_DIR] [--rounds 15]

Fits a Featurizer on DATASET_DIR/train.csv (default: the shared snips set), then times
``transform`` on the texts of DATASET_DIR/test.csv (shuffled once, seed 0) in batches of 1
and of 30: with warm caches (every test text transformed once beforehand) and with cold
ones (a fresh featurizer per batch, built outside the timer). The ``baseline`` is the
transform of before the batched rewrite, kept below for comparison: per text, per word
n-gram and per token Python with a numpy call for every cache miss. Both run side by side
in one process, rounds interleaved; a figure is the best round's mean microseconds per text
(the least disturbed by other load on the machine). Both must give identical bags first.

``fit`` is timed on DATASET_DIR/train.csv against the counting of document frequencies as
it was before the eighteenth session (``baseline_document_frequency``, below), best of up
to 3 interleaved rounds; both must give the same buckets and IDF first. ``fit_transform``
(what a training job calls: the featurizer and the training texts' bags at once) is timed
likewise against ``fit`` then ``transform`` of the same texts, the job's way before the
twentieth session; both must give the same buckets and the same bags bit for bit first.

Prints one JSON object: ``results``, one entry per (impl, batch, cache), ``speedup``,
baseline time over new time per (batch, cache), and ``fit`` and ``fit_transform``: the
texts, both times and their ratio.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from pathlib import Path

import numpy as np

from trainer import read_labelled_csv
from trainer.features import _GROUPS, Bags, Featurizer, FeaturizerConfig
from trainer.hparams import DEFAULT_HPARAMS
from trainer.ngrams import _RUN, _fold, _split_unicode, char_grams, stable_hash, tokenize, word_grams

SNIPS = Path(__file__).resolve().parents[2] / "shared" / "data" / "snips"
BATCHES = (1, 30)
COLD_TEXTS = 150  # texts timed per round with cold caches


def _tokenize_before(text: str) -> tuple[list[str], list[str]]:
    """tokenize() as it was before the rewrite: one regular expression for ASCII text, the
    Unicode path (today's, unchanged) for the rest."""
    folded = _fold(text)
    if not folded.isascii():
        return _split_unicode(folded)
    runs = _RUN.findall(folded)
    return runs, runs


class Baseline:
    """The pre-optimisation transform (for comparison only): the same bags, computed per text,
    with its own n-gram caches as they were (row ints, per-token numpy arrays)."""

    def __init__(self, featurizer: Featurizer) -> None:
        self.featurizer = featurizer
        self.word_rows: dict[str, int] = {}
        self.char_rows: dict[str, np.ndarray] = {}

    def transform(self, texts: Sequence[str]) -> Bags:
        featurizer, config = self.featurizer, self.featurizer.config
        width = max(featurizer.rows, 1)
        word_keys: list[int] = []
        char_parts: list[np.ndarray] = [np.zeros(0, dtype=np.int32)]
        char_bases: list[int] = [0]
        for index, text in enumerate(texts):
            words, tokens = _tokenize_before(text)
            base = index * _GROUPS * width
            grams = words[:] if config.word_ngrams >= 1 else []
            for n in range(2, config.word_ngrams + 1):
                grams += [" ".join(words[i : i + n]) for i in range(len(words) - n + 1)]
            for gram in grams:
                row = self.word_rows.get(gram)
                if row is None:
                    row = self.word_rows[gram] = int(featurizer._rows_of([stable_hash(gram, 0)])[0])
                if row >= 0:
                    word_keys.append(base + row)
            for token in tokens:
                rows = self.char_rows.get(token)
                if rows is None:
                    token_grams = char_grams(token, config.char_ngram_min, config.char_ngram_max)
                    found = featurizer._rows_of([stable_hash(gram, 1) for gram in token_grams])
                    rows = self.char_rows[token] = found[found >= 0].astype(np.int32)
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
        weights = (1.0 + np.log(count)) * featurizer.idf[rows]
        norms = np.sqrt(np.bincount(segment, weights=weights * weights, minlength=len(texts) * _GROUPS))
        weights = (weights / norms[segment]).astype(np.float32)
        offsets = np.searchsorted(segment, np.arange(0, len(texts) * _GROUPS, _GROUPS, dtype=np.int64))
        return Bags(rows, weights, offsets)


def baseline_document_frequency(texts: Sequence[str], config: FeaturizerConfig) -> np.ndarray:
    """Featurizer.fit's counting before the eighteenth session (for comparison only): per text a
    Counter of its n-grams, each distinct n-gram of a 64-text chunk hashed once, and
    ``np.add.at`` on the table of document frequencies."""
    df = np.zeros(config.buckets, dtype=np.int32)
    for start in range(0, len(texts), 64):
        hashed: dict[tuple[int, str], int] = {}
        pairs: list[int] = []
        for index, text in enumerate(texts[start : start + 64]):
            words, tokens = tokenize(text)
            chars: Counter[str] = Counter()
            for token in tokens:
                chars.update(char_grams(token, config.char_ngram_min, config.char_ngram_max))
            for group, counts in enumerate((Counter(word_grams(words, config.word_ngrams)), chars)):
                for gram in counts:
                    bucket = hashed.get((group, gram))
                    if bucket is None:
                        bucket = hashed[group, gram] = stable_hash(gram, group) % config.buckets
                    pairs.append(index * config.buckets + bucket)
        np.add.at(df, np.unique(np.asarray(pairs, dtype=np.int64)) % config.buckets, 1)
    return df


def _best_seconds(runs: Mapping[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Best seconds of each run, rounds interleaved."""
    best: dict[str, float] = {}
    for _ in range(rounds):
        for impl, run in runs.items():
            start = time.perf_counter()
            run()
            best[impl] = min(best.get(impl, float("inf")), time.perf_counter() - start)
    return best


def _fit_times(texts: list[str], config: FeaturizerConfig, rounds: int) -> dict[str, float]:
    """Best seconds of Featurizer.fit and of the baseline's fit, rounds interleaved."""
    fits: dict[str, Callable[[], Featurizer]] = {
        "new": lambda: Featurizer.fit(texts, config),
        "baseline": lambda: Featurizer.of_document_frequency(
            baseline_document_frequency(texts, config), len(texts), config
        ),
    }
    new, baseline = fits["new"](), fits["baseline"]()
    if not (np.array_equal(new.buckets, baseline.buckets) and np.array_equal(new.idf, baseline.idf)):
        raise SystemExit("fit disagrees with the baseline")
    return _best_seconds(fits, rounds)


def _fit_then_transform(texts: list[str], config: FeaturizerConfig) -> tuple[Featurizer, Bags]:
    """What a training job did before fit_transform: fit, then transform the same texts."""
    fitted = Featurizer.fit(texts, config)
    return fitted, fitted.transform(texts)


def _fit_transform_times(texts: list[str], config: FeaturizerConfig, rounds: int) -> dict[str, float]:
    """Best seconds of Featurizer.fit_transform and of fit then transform, rounds interleaved."""
    runs: dict[str, Callable[[], tuple[Featurizer, Bags]]] = {
        "new": lambda: Featurizer.fit_transform(texts, config),
        "baseline": lambda: _fit_then_transform(texts, config),
    }
    (new, new_bags), (baseline, baseline_bags) = runs["new"](), runs["baseline"]()
    same_buckets = np.array_equal(new.buckets, baseline.buckets)
    if _fingerprint(new_bags) != _fingerprint(baseline_bags) or not same_buckets:
        raise SystemExit("fit_transform disagrees with fit then transform")
    return _best_seconds(runs, rounds)


def _report(texts: int, best: dict[str, float]) -> dict[str, object]:
    """The texts, both best times and the baseline's over the new one."""
    return {
        "texts": texts,
        "new_s": round(best["new"], 3),
        "baseline_s": round(best["baseline"], 3),
        "speedup": round(best["baseline"] / best["new"], 2),
    }


Transform = Callable[[Sequence[str]], Bags]


def _implementations(fitted: Featurizer) -> dict[str, Callable[[], Transform]]:
    """Per implementation, a factory of transforms with empty caches."""

    def fresh() -> Featurizer:
        return Featurizer(fitted.config, fitted.buckets, fitted.idf)

    return {"new": lambda: fresh().transform, "baseline": lambda: Baseline(fresh()).transform}


def _fingerprint(bags: Bags) -> list[tuple[np.dtype, bytes]]:
    return [(array.dtype, array.tobytes()) for array in (bags.ids, bags.weights, bags.offsets)]


def _check_identical(implementations: dict[str, Callable[[], Transform]], texts: list[str]) -> None:
    """Exit unless every implementation gives the baseline's bags, bit for bit, cold and warm."""
    expected = _fingerprint(implementations["baseline"]()(texts))
    for impl, make in implementations.items():
        transform = make()
        if _fingerprint(transform(texts)) != expected or _fingerprint(transform(texts)) != expected:
            raise SystemExit(f"{impl} disagrees with the baseline")


def _us_per_text(
    make: Callable[[], Transform], batches: list[list[str]], warm_with: list[str] | None
) -> float:
    """Mean microseconds per text over the batches: one transform, warmed on warm_with, for all of
    them; or, without warm_with, a new transform (empty caches) for each batch."""
    elapsed = 0.0
    transform = make()
    if warm_with is not None:
        transform(warm_with)
    for batch in batches:
        if warm_with is None:
            transform = make()
        start = time.perf_counter()
        transform(batch)
        elapsed += time.perf_counter() - start
    return elapsed / sum(map(len, batches)) * 1e6


def _served_config() -> FeaturizerConfig:
    """The featurizer settings of every trained model (trainer.engine copies them from the hparams)."""
    return FeaturizerConfig(
        **{field.name: getattr(DEFAULT_HPARAMS, field.name) for field in fields(FeaturizerConfig)}
    )


def _best_times(
    implementations: dict[str, Callable[[], Transform]], texts: list[str], rounds: int
) -> dict[tuple[str, int, str], float]:
    """(impl, batch, cache) -> the best round's microseconds per text."""
    best: dict[tuple[str, int, str], float] = {}
    gc.disable()  # a collection would land in whichever timer runs
    try:
        for _ in range(rounds):
            for size in BATCHES:
                batches = [texts[i : i + size] for i in range(0, len(texts) - size + 1, size)]
                cold = batches[: max(1, COLD_TEXTS // size)]  # cold runs are slow: fewer of them
                for cache, timed, warm_with in (("warm", batches, texts), ("cold", cold, None)):
                    for impl, make in implementations.items():
                        figure = _us_per_text(make, timed, warm_with)
                        best[impl, size, cache] = min(best.get((impl, size, cache), figure), figure)
    finally:
        gc.enable()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "dataset", nargs="?", type=Path, default=SNIPS, help="folder of train.csv and test.csv"
    )
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds; the best one counts")
    args = parser.parse_args()
    train_texts = read_labelled_csv(args.dataset / "train.csv").texts
    fitted = Featurizer.fit(train_texts, _served_config())
    texts = read_labelled_csv(args.dataset / "test.csv").texts
    random.Random(0).shuffle(texts)
    implementations = _implementations(fitted)
    _check_identical(implementations, texts)
    best = _best_times(implementations, texts, args.rounds)
    results = [
        {"impl": impl, "batch": size, "cache": cache, "us_per_text": round(figure, 2)}
        for (impl, size, cache), figure in best.items()
    ]
    speedup = {
        f"batch{size}_{cache}": round(best["baseline", size, cache] / best["new", size, cache], 2)
        for (impl, size, cache) in best
        if impl == "new"
    }
    fit_rounds = min(args.rounds, 3)
    fit = _report(len(train_texts), _fit_times(train_texts, _served_config(), fit_rounds))
    both = _report(len(train_texts), _fit_transform_times(train_texts, _served_config(), fit_rounds))
    print(json.dumps({"results": results, "speedup": speedup, "fit": fit, "fit_transform": both}))


if __name__ == "__main__":
    main()
