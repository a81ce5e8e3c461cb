from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

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
    assert tokenize("Ｐlay  JAZZ, please!") == ["play", "jazz", "please"]


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
