"""Out-of-scope scoring (trainer.in_scope): set from a classifier's own held-out rows, saved with
it, and refused when a model directory's copy does not fit."""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from trainer.data import OUT_OF_SCOPE_CLASS, LabelledData, MultiLabelData
from trainer.engine import train
from trainer.errors import CheckpointCorrupt, InvalidTrainingData
from trainer.hparams import HParams
from trainer.in_scope import NEIGHBOURS, QUANTILES, InScope, fit_in_scope, nearest_cosines
from trainer.inference import META_FILE, WEIGHTS_FILE, LoadedModel


def _unit_rows(rows: int, dim: int, seed: int, spread: float = 1.0) -> np.ndarray:
    """Unit rows around the first axis (``spread``: the noise's scale; large: anywhere)."""
    matrix = np.random.default_rng(seed).normal(size=(rows, dim)).astype(np.float32) * spread
    matrix[:, 0] += 1.0
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def test_the_held_out_rows_score_evenly_so_the_rate_is_the_share_rejected() -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(400, 5)) * 3
    neighbours = _unit_rows(300, 16, 1, spread=0.3)
    own = rng.integers(0, 300, size=400)
    scoring = fit_in_scope(logits, 1.5, None, neighbours, own, rate=0.02, neighbour_weight=0.5)

    z = logits / 1.5
    confidences = np.exp(z).max(axis=1) / np.exp(z).sum(axis=1)
    # the held-out rows' raw scores again, each nearest text found without the row's own
    nearest = nearest_cosines(scoring.neighbours, torch.from_numpy(neighbours[own]), own)
    raw = (confidences - scoring.confidence_mean) / scoring.confidence_std
    raw += 0.5 * (nearest - scoring.neighbour_mean) / scoring.neighbour_std
    scores = np.interp(raw, scoring.quantiles, np.linspace(0, 1, QUANTILES))
    assert np.mean(scores < 0.02) == pytest.approx(0.02, abs=1 / 400)
    assert np.mean(scores < 0.5) == pytest.approx(0.5, abs=1 / 400)
    # a text far from every training text and unsure of its class scores below them all
    far = -neighbours[:1]
    assert scoring.scores(np.array([0.2]), far)[0] == 0.0
    assert scoring.scores(np.array([1.0]), neighbours[:1])[0] == 1.0  # a training text, sure


def test_the_nearest_training_text_of_a_held_out_row_is_another() -> None:
    neighbours = torch.from_numpy(_unit_rows(50, 8, 2, spread=10.0))
    with_itself = nearest_cosines(neighbours, neighbours)
    without = nearest_cosines(neighbours, neighbours, np.arange(50))
    assert with_itself == pytest.approx(np.ones(50), abs=1e-6)
    expected = (neighbours @ neighbours.T).fill_diagonal_(-2).max(dim=1).values.numpy()
    assert without == pytest.approx(expected, abs=1e-6)


def test_an_n_gram_model_weighs_its_confidence_alone() -> None:
    logits = np.random.default_rng(3).normal(size=(100, 4))
    scoring = fit_in_scope(logits, 1.0, None, None, None, rate=0.05, neighbour_weight=0.5)
    assert scoring.neighbours is None and scoring.neighbour_weight == 0.0
    low, high = scoring.scores(np.array([0.26, 0.99]), None)
    assert low < 0.05 < high
    again = InScope.from_dict(json.loads(json.dumps(scoring.as_dict())), None, None)
    assert again.scores(np.array([0.26, 0.99]), None).tolist() == [low, high]


@pytest.fixture
def model_dir(tmp_path: Path, small_data: LabelledData, quick_hparams: HParams) -> Path:
    train(small_data, workdir=tmp_path / "w", out_dir=tmp_path / "m", hparams=quick_hparams)
    return tmp_path / "m"


def test_a_trained_classifier_scores_texts_of_none_of_its_classes_out_of_scope(model_dir: Path) -> None:
    model = LoadedModel.load(model_dir)
    assert model.in_scope is not None and model.in_scope.rate == 0.02
    texts = ["play a jazz song please", "rain forecast for tonight", "qwzx vbnm plok", "ødelagt kjøleskap"]
    scores = model.in_scope_scores(model.probabilities(texts))
    assert scores is not None and all(0.0 <= s <= 1.0 for s in scores)
    assert min(scores[:2]) > 0.02 > max(scores[2:]), scores
    meta = json.loads((model_dir / META_FILE).read_text())
    assert len(meta["in_scope"]["quantiles"]) == QUANTILES
    assert meta["hparams"]["in_scope_rate"] == 0.02
    assert meta["metrics"]["out_of_scope"] == {"rate": 0.02, "neighbour_weight": 0.0}  # n-grams: none


def test_a_multi_label_classifier_has_no_in_scope_score(tmp_path: Path, quick_hparams: HParams) -> None:
    texts = [f"{a} {b} please" for a in ("rain", "snow", "jazz", "song") for b in ("now", "today", "here")]
    label_sets = [("weather",) if t.split()[0] in ("rain", "snow") else ("fun", "music") for t in texts]
    train(
        MultiLabelData(texts, label_sets),
        workdir=tmp_path / "w",
        out_dir=tmp_path / "m",
        hparams=quick_hparams,
    )
    model = LoadedModel.load(tmp_path / "m")
    assert model.in_scope is None and model.in_scope_scores(model.probabilities(["rain now"])) is None


def _forge(model_dir: Path, change: Callable[[dict, dict], None]) -> None:
    """Apply ``change`` to model.json and the weights, checksum kept right (a forged bundle)."""
    meta = json.loads((model_dir / META_FILE).read_text())
    weights = torch.load(model_dir / WEIGHTS_FILE, weights_only=True)
    change(meta, weights)
    buffer = io.BytesIO()
    torch.save(weights, buffer)
    (model_dir / WEIGHTS_FILE).write_bytes(buffer.getvalue())
    meta["weights_sha256"] = hashlib.sha256(buffer.getvalue()).hexdigest()
    (model_dir / META_FILE).write_text(json.dumps(meta))


def _set(key: str, value: object) -> Callable[[dict, dict], None]:
    return lambda meta, weights: meta["in_scope"].__setitem__(key, value)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (_set("rate", 1.5), "rate 1.5 is not between 0 and 1"),
        (_set("rate", True), "rate must be a finite number"),
        (_set("confidence_std", 0.0), "confidence_std must be positive"),
        (_set("neighbour_mean", float("nan")), "neighbour_mean must be a finite number"),
        (_set("quantiles", [1.0] * 10), f"quantiles must be {QUANTILES} numbers"),
        (_set("quantiles", list(np.linspace(1, 0, QUANTILES))), "quantiles must be finite and rising"),
        (_set("neighbour_weight", 0.5), f"no '{NEIGHBOURS}'"),
        (lambda meta, weights: meta.__setitem__("in_scope", []), "'in_scope' must be an object"),
        (
            lambda meta, weights: weights.__setitem__(NEIGHBOURS, torch.zeros(1, 3).expand(10**6, 3)),
            f"'{NEIGHBOURS}' does not store each of its",
        ),
    ],
    ids=["rate", "rate-bool", "std", "nan", "short", "falling", "no-neighbours", "not-object", "expanded"],
)
def test_load_refuses_an_in_scope_scoring_that_does_not_fit(
    model_dir: Path, change: Callable[[dict, dict], None], problem: str
) -> None:
    _forge(model_dir, change)
    with pytest.raises(CheckpointCorrupt, match=problem):
        LoadedModel.load(model_dir)


def test_a_model_saved_before_out_of_scope_detection_answers_without_a_score(model_dir: Path) -> None:
    _forge(model_dir, lambda meta, weights: meta.pop("in_scope"))
    model = LoadedModel.load(model_dir)
    assert model.in_scope is None and model.in_scope_scores(model.probabilities(["rain"])) is None


def _with_negatives(data: LabelledData) -> LabelledData:
    """``data`` and twenty examples of text of none of its classes, under the reserved class."""
    subjects = ["my card", "the loan", "a mortgage", "the car insurance", "my pension"]
    verbs = ["cancel", "renew", "explain", "compare"]
    negatives = [f"{verb} {subject} please" for verb in verbs for subject in subjects]
    return LabelledData(data.texts + negatives, data.labels + [OUT_OF_SCOPE_CLASS] * len(negatives))


def test_examples_under_the_reserved_class_are_negatives_never_an_answer(
    tmp_path: Path, small_data: LabelledData, quick_hparams: HParams
) -> None:
    data = _with_negatives(small_data)
    train(data, workdir=tmp_path / "w", out_dir=tmp_path / "m", hparams=quick_hparams)
    model = LoadedModel.load(tmp_path / "m")
    texts = ["play a jazz song please", "renew the car insurance please", "explain my card please"]

    probabilities = model.probabilities(texts)
    ranked = model.rank(probabilities)
    scores = model.in_scope_scores(probabilities)

    assert OUT_OF_SCOPE_CLASS in model.labels and model.classes == ["booking", "music", "weather"]
    for answer in ranked:
        assert [label for label, _ in answer] != [] and OUT_OF_SCOPE_CLASS not in dict(answer)
        assert sum(confidence for _, confidence in answer) == pytest.approx(1.0)
    assert ranked[0][0][0] == "music"
    assert scores is not None and scores[0] > 0.02 and scores[1:] == [0.0, 0.0]  # most like the negatives


def test_the_reserved_class_is_refused_where_it_cannot_work(
    tmp_path: Path, small_data: LabelledData, quick_hparams: HParams
) -> None:
    negatives = _with_negatives(small_data)
    with pytest.raises(InvalidTrainingData, match="is for single-label classifiers only"):
        train(
            negatives, workdir=tmp_path / "w", out_dir=tmp_path / "m", hparams=quick_hparams, multi_label=True
        )
    kept = [i for i, label in enumerate(negatives.labels) if label not in ("music", "booking")]
    one_class = LabelledData([negatives.texts[i] for i in kept], [negatives.labels[i] for i in kept])
    with pytest.raises(InvalidTrainingData, match="at least two classes besides __out_of_scope__"):
        train(one_class, workdir=tmp_path / "w2", out_dir=tmp_path / "m2", hparams=quick_hparams)
