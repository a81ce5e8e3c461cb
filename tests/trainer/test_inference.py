from __future__ import annotations

import hashlib
import io
import json
import math
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from trainer.data import LabelledData
from trainer.engine import train
from trainer.errors import CheckpointCorrupt, InvalidTrainingData, WeightsOutOfBounds
from trainer.features import Featurizer, FeaturizerConfig
from trainer.hparams import HParams
from trainer.inference import META_FILE, WEIGHTS_FILE, LoadedModel, _ranked, save_model
from trainer.model import ModelConfig, TextClassifier


@pytest.fixture
def model_dir(tmp_path: Path, small_data: LabelledData, quick_hparams: HParams) -> Path:
    train(small_data, workdir=tmp_path / "w", out_dir=tmp_path / "m", hparams=quick_hparams)
    return tmp_path / "m"


def test_classify_ranks_every_class_and_confidences_sum_to_one(model_dir: Path) -> None:
    model = LoadedModel.load(model_dir)
    results = model.classify(["is it going to rain", "play a jazz song", "", "çà et là 🙂"])
    assert len(results) == 4
    for scores in results:
        assert sorted(label for label, _ in scores) == sorted(model.labels) == ["booking", "music", "weather"]
        confidences = [c for _, c in scores]
        assert confidences == sorted(confidences, reverse=True)
        assert math.isclose(sum(confidences), 1.0, abs_tol=1e-9)
    assert results[0][0][0] == "weather" and results[1][0][0] == "music"
    assert model.classify([]) == []
    assert model.nbytes > 0


def test_the_top_classes_are_the_first_of_the_whole_ranking(model_dir: Path) -> None:
    model = LoadedModel.load(model_dir)
    texts = ["is it going to rain", "play a jazz song", "book a table"]
    whole = model.classify(texts)
    for top in (1, 2, 3, 10):
        assert model.classify(texts, top=top) == [scores[:top] for scores in whole]


@given(st.lists(st.sampled_from([0.0, 0.1, 0.25, 0.5, 1.0]), min_size=1, max_size=40), st.integers(1, 45))
def test_ranking_the_top_keeps_ties_in_index_order(row: list[float], top: int) -> None:
    values = np.array(row)
    assert _ranked(values, top).tolist() == np.argsort(-values, kind="stable")[:top].tolist()


def test_load_refuses_an_altered_weights_file(model_dir: Path) -> None:
    LoadedModel.load(model_dir)
    with open(model_dir / WEIGHTS_FILE, "r+b") as handle:
        handle.seek(100)
        handle.write(b"\x00\x01\x02")
    with pytest.raises(CheckpointCorrupt, match="checksum"):
        LoadedModel.load(model_dir)


def _replace_weights(model_dir: Path, payload: bytes) -> None:
    """Write ``payload`` as the weights, with model.json's checksum to match (a forged model)."""
    (model_dir / WEIGHTS_FILE).write_bytes(payload)
    meta = json.loads((model_dir / META_FILE).read_text())
    meta["weights_sha256"] = hashlib.sha256(payload).hexdigest()
    (model_dir / META_FILE).write_text(json.dumps(meta))


def _saved(value: object) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("forge", "problem"),
    [
        (lambda _: b"not a torch file", "not a tensors-only torch file"),
        (lambda _: b"", "not a tensors-only torch file"),
        (lambda _: _saved([1, 2]), "does not hold named tensors"),
        (lambda weights: _saved({**weights, "idf": "high"}), "no tensor 'idf'"),
        (
            lambda weights: _saved({**weights, "output.bias": weights["output.bias"] * math.nan}),
            "NaN, infinite or values beyond ±1e",
        ),
        (
            lambda weights: _saved({**weights, "embedding": weights["embedding"] * math.inf}),
            "NaN, infinite or values beyond ±1e",
        ),
        (  # finite, but a logit overflows float32: every confidence was NaN
            lambda weights: _saved(
                {
                    **weights,
                    "embedding": torch.full_like(weights["embedding"], 60000),
                    "output.weight": torch.full_like(weights["output.weight"], 1e36),
                }
            ),
            "NaN, infinite or values beyond ±1e",
        ),
    ],
    ids=["garbage", "empty", "a-list", "a-string", "nan", "inf", "overflowing"],
)
def test_load_refuses_weights_that_are_not_finite_named_tensors(
    model_dir: Path, forge: Callable[[dict[str, torch.Tensor]], bytes], problem: str
) -> None:
    """Checksums that match (a forged bundle) do not make odd weights a model: a NaN one
    would answer every classify with NaN confidences."""
    weights = torch.load(model_dir / WEIGHTS_FILE, weights_only=True)
    _replace_weights(model_dir, forge(weights))
    with pytest.raises(CheckpointCorrupt, match=problem):
        LoadedModel.load(model_dir)


def test_weights_no_loader_would_take_are_never_saved(tmp_path: Path) -> None:
    """A diverged multi-label training saved weights beyond the bound: its job ended Available,
    and every classify of it was a 503."""
    model = TextClassifier(ModelConfig(rows=4, dim=8, classes=3), embedding_init=0.1, output_init=1.0)
    with torch.no_grad():
        model.embedding.weight[2, 5] = 3e6
    featurizer, _ = Featurizer.fit_transform(["a b", "c d"], FeaturizerConfig())

    with pytest.raises(WeightsOutOfBounds, match="'embedding' holds NaN, infinite or values beyond"):
        save_model(tmp_path / "m", model, featurizer, ["x", "y", "z"], 1.0, {})
    assert not (tmp_path / "m").exists()


def test_data_where_no_text_has_a_word_is_refused(tmp_path: Path) -> None:
    data = LabelledData(["!!!", "???", "... !", "😀😀"] * 3, ["a", "b"] * 6)

    with pytest.raises(InvalidTrainingData, match="no text has a letter or a digit"):
        train(data, workdir=tmp_path / "w", out_dir=tmp_path / "m")


def test_folds_whose_rows_have_no_word_train_and_the_model_loads(tmp_path: Path) -> None:
    """A fold model of texts without a letter or digit has no embedding rows; checking its
    weights' range raised (aminmax of nothing), and the job failed as an internal error."""
    data = LabelledData(["!!!", "???", "...", "😀😀", "hello there"], ["a", "b", "a", "b", "a"])

    result = train(data, workdir=tmp_path / "w", out_dir=tmp_path / "m")

    assert result.metrics["evaluated_on"] == "cross-validation"
    scores = LoadedModel.load(tmp_path / "m").classify(["hello there"])[0]
    assert math.isclose(sum(score for _, score in scores), 1.0, rel_tol=1e-5)


def test_a_directory_without_a_model_is_corrupt(tmp_path: Path) -> None:
    with pytest.raises(CheckpointCorrupt):
        LoadedModel.load(tmp_path)


def test_a_batch_scores_each_text_as_it_would_alone(model_dir: Path) -> None:
    model = LoadedModel.load(model_dir)
    texts = [f"play the {word} song tonight" for word in ("jazz", "rain", "table", "", "🙂")] * 6
    batch = model.classify(texts)
    for text, scores in zip(texts, batch, strict=True):
        alone = model.classify([text])[0]
        assert [label for label, _ in alone] == [label for label, _ in scores]
        assert all(math.isclose(a, b, abs_tol=1e-6) for (_, a), (_, b) in zip(alone, scores, strict=True))


def test_model_json_holds_non_ascii_class_names_as_utf8(
    tmp_path: Path, small_data: LabelledData, quick_hparams: HParams
) -> None:
    names = {"booking": "réservation 🍽", "music": "音楽", "weather": "météo 🌧"}
    data = LabelledData(small_data.texts, [names[label] for label in small_data.labels])
    train(data, workdir=tmp_path / "w", out_dir=tmp_path / "m", hparams=quick_hparams)

    raw = (tmp_path / "m" / META_FILE).read_bytes()
    assert "météo 🌧".encode() in raw and b"\\u" not in raw
    assert LoadedModel.load(tmp_path / "m").labels == sorted(names.values())


@pytest.mark.slow
def test_what_classify_texts_leave_in_a_loaded_model_is_within_its_counted_bytes(model_dir: Path) -> None:
    """The featurizer caches the rows of every n-gram and token it meets, 32,768 entries a
    cache, but an entry of a 2,000-letter token holds thousands of rows: 600 such texts left
    10 MB in a model counted at 62 KB, and a tenant could leave 0.67 GB in each of its models
    while the model cache's budget saw none of it. The caches' bound is counted in nbytes."""
    model = LoadedModel.load(model_dir)
    draw = np.random.default_rng(0)
    words = ["weather", "rain", "tomorrow", "music", "play", "song", "cold", "jazz"]

    def token(i: int) -> str:
        return "".join(draw.choice(words, size=300))[:2040] + format(i, "x")

    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for call in range(20):
        model.classify([token(call * 30 + text) for text in range(30)], top=10)
    kept = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()

    weights = sum(t.numel() * t.element_size() for t in model.model.parameters())
    assert model.nbytes >= weights + 2 * model.featurizer.cache_bytes
    assert kept <= 2 * model.featurizer.cache_bytes + (1 << 20), (kept, model.featurizer.cache_bytes)
    text = ["will it rain tomorrow"]
    assert model.classify(text) == LoadedModel.load(model_dir).classify(text)  # the caches serve as before
