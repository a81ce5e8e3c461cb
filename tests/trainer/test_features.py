from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from trainer import features
from trainer.features import Featurizer, FeaturizerConfig, hashed_counts, tokenize

TEXTS = ["Book a table for two tonight!", "Play some jazz, please", "Wird es morgen in München regnen?"]


def _buckets_in_fresh_process() -> list[int]:
    code = (
        "import json, sys\n"
        "from trainer.features import FeaturizerConfig, hashed_counts\n"
        f"print(json.dumps(hashed_counts({TEXTS!r}, FeaturizerConfig())[2].tolist()))\n"
    )
    env = {"PYTHONHASHSEED": "random", "PATH": ""}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout)


def test_hashing_is_identical_across_processes_with_random_hash_seeds() -> None:
    here = hashed_counts(TEXTS, FeaturizerConfig())[2].tolist()
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


def _reference_vector(featurizer: Featurizer, text: str, table: np.ndarray) -> np.ndarray:
    """A text's bag summed over ``table``, straight from the definition: sublinear TF x IDF, L2 per group."""
    _, group, bucket, count = hashed_counts([text], featurizer.config)
    total = np.zeros(table.shape[1])
    for g in (0, 1):
        rows = np.searchsorted(featurizer.buckets, bucket[group == g])
        known = rows < featurizer.rows
        known[known] = featurizer.buckets[rows[known]] == bucket[group == g][known]
        weights = (1 + np.log(count[group == g][known])) * featurizer.idf[rows[known]]
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
