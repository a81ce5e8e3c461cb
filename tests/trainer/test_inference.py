from __future__ import annotations

import hashlib
import io
import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from trainer.data import LabelledData
from trainer.engine import train
from trainer.errors import CheckpointCorrupt
from trainer.hparams import HParams
from trainer.inference import META_FILE, WEIGHTS_FILE, LoadedModel


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
