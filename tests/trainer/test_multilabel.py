"""Multi-label mode: grouping rows by text, the split, the decision rule and its metrics, training
with K = 1 and K = 2, resume, the saved model, bundles and the CLI."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from synthetic import write_csv

from trainer import engine, held_out
from trainer.bundle import write_bundle
from trainer.data import LabelledData, MultiLabelData, multilabel_split
from trainer.engine import train
from trainer.errors import CheckpointCorrupt, InvalidTrainingData, NonFiniteLoss, TrainingStopped
from trainer.evaluate import (
    DEFAULT_THRESHOLD,
    THRESHOLDS,
    choose_threshold,
    decide,
    decide_on_other_half,
    micro_f1,
    multilabel_report,
)
from trainer.hparams import HParams
from trainer.inference import META_FILE, MULTI_LABEL_FORMAT, WEIGHTS_FILE, LoadedModel

# Each label is driven by its own key words, independently of the others.
_KEYS = {
    "weather": ["rain", "snow", "forecast", "umbrella"],
    "travel": ["paris", "flight", "hotel", "passport"],
    "music": ["jazz", "guitar", "album", "playlist"],
}
_FILLER = ["please", "the", "a", "for", "me", "now", "can", "you", "what", "is", "about", "tell"]


def keyword_rows(examples: int, seed: int = 3) -> LabelledData:
    """Canonical rows (one per text and label) of ``examples`` texts, each label present with
    probability 0.4 (at least one per text) and signalled by one of its key words."""
    rng = random.Random(seed)
    texts, labels = [], []
    for _ in range(examples):
        chosen = [label for label in _KEYS if rng.random() < 0.4] or [rng.choice(list(_KEYS))]
        words = [rng.choice(_KEYS[label]) for label in chosen] + rng.sample(_FILLER, 4)
        rng.shuffle(words)
        text = " ".join(words)
        texts += [text] * len(chosen)
        labels += chosen
    return LabelledData(texts, labels)


@pytest.fixture
def rows() -> LabelledData:
    return keyword_rows(90)


def _weights(model_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(model_dir / WEIGHTS_FILE, weights_only=True)


# --- data ---------------------------------------------------------------------------------


def test_rows_of_one_text_become_one_example_with_the_union_of_their_labels() -> None:
    rows = LabelledData(
        ["rain in paris", "jazz", "rain in paris", "snow", "jazz", "rain in paris"],
        ["weather", "music", "travel", "weather", "music", "weather"],
    )
    grouped = rows.grouped()
    assert grouped == MultiLabelData(
        ["rain in paris", "jazz", "snow"], [("travel", "weather"), ("music",), ("weather",)]
    )
    assert len(grouped) == 3 and grouped.classes == ["music", "travel", "weather"]


def test_the_split_is_seeded_sized_and_keeps_two_of_every_class_in_training() -> None:
    label_sets = [("a",)] * 30 + [("a", "b")] * 6 + [("c",)] * 3 + [("d",)] * 2 + [("b", "c")]
    first = multilabel_split(label_sets, 0.25, seed=5)
    assert all(
        np.array_equal(x, y) for x, y in zip(first, multilabel_split(label_sets, 0.25, 5), strict=True)
    )
    train_idx, validation_idx = first
    assert sorted([*train_idx, *validation_idx]) == list(range(len(label_sets)))
    assert len(validation_idx) == round(0.25 * len(label_sets))
    in_training = [label for i in train_idx for label in label_sets[i]]
    assert in_training.count("d") == 2  # too few to give any
    assert all(in_training.count(label) >= 2 for label in "abc")


def test_one_class_in_all_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidTrainingData, match="two classes"):
        train(
            LabelledData(["a b", "c d"], ["x", "x"]),
            workdir=tmp_path / "w",
            out_dir=tmp_path / "m",
            multi_label=True,
        )


# --- decisions and metrics ----------------------------------------------------------------


def test_the_decision_takes_every_class_at_the_threshold_and_at_least_the_top_one() -> None:
    probabilities = np.array([[0.9, 0.5, 0.1], [0.2, 0.3, 0.1], [0.6, 0.7, 0.4]])
    assert decide(probabilities, 0.5).tolist() == [
        [True, True, False],
        [False, True, False],  # nothing passes: the top class
        [True, True, False],
    ]


def test_metrics_match_a_hand_computed_example() -> None:
    true = [["a", "b"], ["a"], ["c"], ["b", "c"]]
    predicted = [["a"], ["a", "b"], ["c"], ["c", "d"]]
    report = multilabel_report(true, predicted)
    # per (text, class) over a..d: TP 4 (a, a, c, c), FP 2 (b in 2, d in 4), FN 2 (b in 1, b in 4)
    assert report["micro_precision"] == pytest.approx(4 / 6)
    assert report["micro_recall"] == pytest.approx(4 / 6)
    assert report["micro_f1"] == pytest.approx(4 / 6)
    per_class = report["per_class"]
    assert per_class["a"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 2}  # type: ignore[index]
    assert per_class["b"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 2}  # type: ignore[index]
    assert per_class["c"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 2}  # type: ignore[index]
    assert per_class["d"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}  # type: ignore[index]
    assert report["macro_f1"] == pytest.approx(0.5)
    assert report["macro_precision"] == pytest.approx(0.5)
    assert report["macro_recall"] == pytest.approx(0.5)
    assert report["hamming_loss"] == pytest.approx(4 / 16)  # 4 wrong decisions of 4 texts x 4 classes
    assert report["subset_accuracy"] == pytest.approx(1 / 4)  # only text 3 is exactly right
    assert report["n"] == 4
    assert json.loads(json.dumps(report)) == report


def test_metrics_agree_with_scikit_learn_on_random_label_sets() -> None:
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    truth, chosen = rng.random((40, 5)) < 0.3, rng.random((40, 5)) < 0.4
    truth[0], chosen[0] = True, True  # every class occurs, so both count the same classes
    report = multilabel_report(
        *([["abcde"[j] for j in np.flatnonzero(row)] for row in m] for m in (truth, chosen))
    )
    for average in ("micro", "macro"):
        for name, score in (("f1", metrics.f1_score), ("precision", metrics.precision_score)):
            assert report[f"{average}_{name}"] == pytest.approx(
                score(truth, chosen, average=average, zero_division=0)
            )
        assert report[f"{average}_recall"] == pytest.approx(
            metrics.recall_score(truth, chosen, average=average)
        )
    assert report["hamming_loss"] == pytest.approx(metrics.hamming_loss(truth, chosen))
    assert report["subset_accuracy"] == pytest.approx(metrics.accuracy_score(truth, chosen))


def test_the_threshold_is_the_candidate_with_the_best_micro_f1() -> None:
    truth = np.array([[True, False], [True, True], [False, True]])
    probabilities = np.array([[0.8, 0.1], [0.7, 0.32], [0.1, 0.9]])
    threshold, score = choose_threshold(probabilities, truth)
    assert 0.1 < threshold <= 0.32 and score == 1.0  # 0.32 must pass, 0.1 must not
    assert threshold == 0.3  # of the perfect candidates (0.15 ... 0.30), the one nearest 0.5
    assert score == micro_f1(truth, decide(probabilities, threshold))


def test_reported_decisions_use_the_threshold_chosen_on_the_other_half() -> None:
    # Even rows' positives score 0.3 (negatives 0.1): their own best threshold is 0.3. Odd rows'
    # positives score 0.8 (negatives 0.45): theirs is 0.5. Each half is decided at the other's.
    even = [[0.3, 0.1, 0.1], [0.1, 0.3, 0.1], [0.3, 0.1, 0.3]]
    odd = [[0.8, 0.45, 0.1], [0.45, 0.8, 0.8], [0.1, 0.45, 0.8]]
    probabilities = np.array([row for pair in zip(even, odd, strict=True) for row in pair])
    truth = probabilities >= 0.3
    truth[1::2] = probabilities[1::2] >= 0.5

    chosen = decide_on_other_half(probabilities, truth)

    assert choose_threshold(probabilities[0::2], truth[0::2])[0] == 0.3
    assert choose_threshold(probabilities[1::2], truth[1::2])[0] == 0.5
    # Even rows at 0.5: only each row's most probable class. Odd rows at 0.3: the 0.45s too.
    assert chosen[0::2].tolist() == decide(probabilities[0::2], 0.5).tolist()
    assert chosen[1::2].tolist() == decide(probabilities[1::2], 0.3).tolist()
    assert micro_f1(truth, chosen) < choose_threshold(probabilities, truth)[1]  # no flattery
    assert (
        decide_on_other_half(probabilities[:1], truth[:1]).tolist() == decide(probabilities[:1], 0.5).tolist()
    )


# --- training -----------------------------------------------------------------------------


@pytest.mark.parametrize("learners", [1, 2])
def test_independent_keyword_labels_train_to_a_high_micro_f1(
    tmp_path: Path, rows: LabelledData, quick_hparams: HParams, learners: int
) -> None:
    result = train(
        rows,
        workdir=tmp_path / "w",
        out_dir=tmp_path / "m",
        hparams=quick_hparams,
        learners=learners,
        multi_label=True,
    )
    metrics = result.metrics
    assert result.learners == learners
    assert metrics["evaluated_on"] == "validation"
    assert metrics["n"] == round(quick_hparams.validation_fraction * len(rows.grouped()))
    assert metrics["micro_f1"] >= 0.9  # type: ignore[operator]
    assert metrics["threshold"] in THRESHOLDS
    assert set(metrics["per_class"]) == set(_KEYS)  # type: ignore[arg-type]
    assert json.loads(json.dumps(metrics)) == metrics


def _many_classes(classes: int, rows: int) -> LabelledData:
    """Each class three made-up words of a small syllable set (so classes share n-grams) and a
    fourth word per row."""
    rng = random.Random(1)
    syllables = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "ze", "pi", "su", "de", "fa"]

    def word() -> str:
        return "".join(rng.choice(syllables) for _ in range(3))

    texts, labels = [], []
    for c in range(classes):
        base = [word() for _ in range(3)]
        for _ in range(rows):
            texts.append(" ".join([*base, word()]))
            labels.append(f"class_{c}")
    return LabelledData(texts, labels)


@pytest.mark.slow
def test_hundreds_of_classes_train_with_the_default_hparams(tmp_path: Path) -> None:
    """From zero biases, 300 classes of 10 rows diverged (a non-finite loss; at 600 the job could
    even end with weights no model loader takes): their biases start at the classes' log-odds."""
    data = _many_classes(400, 10)

    result = train(data, workdir=tmp_path / "w", out_dir=tmp_path / "m", learners=2, multi_label=True)

    assert result.metrics["micro_f1"] >= 0.95  # type: ignore[operator]
    bias = _weights(tmp_path / "m")["output.bias"]
    assert float(bias.max()) < -3  # every class starts near its share, about 1 in 400
    LoadedModel.load(tmp_path / "m")


def _many_labels_a_text(classes: int, texts: int, labels: int) -> LabelledData:
    """Tagging data: each text ``labels`` of ``classes`` tags, each tag signalled by a made-up key
    word of its own in the text."""
    rng = random.Random(7)
    syllables = ["ka", "lo", "mi", "ne", "ru", "ta", "vo", "ze", "pi", "su", "de", "fa"]
    keys = ["".join(rng.choice(syllables) for _ in range(3)) + str(c) for c in range(classes)]
    rows, tags = [], []
    for i in range(texts):
        chosen = rng.sample(range(classes), labels)
        text = " ".join([*(keys[c] for c in chosen), f"doc{i}"])
        rows += [text] * labels
        tags += [f"tag{c}" for c in chosen]
    return LabelledData(rows, tags)


def test_texts_of_many_labels_each_train_at_a_lower_rate_instead_of_diverging(tmp_path: Path) -> None:
    """20 labels a text of 100 classes: at the fixed rate the summed loss's step made the loss
    infinite at update 40 (the job Failed, "Training diverged", on every attempt); the training
    starts over at half the rate, which the checkpoints and the saved model carry."""
    data = _many_labels_a_text(100, 1000, 20)

    result = train(data, workdir=tmp_path / "w", out_dir=tmp_path / "m", multi_label=True)

    assert result.metrics["micro_f1"] >= 0.85  # type: ignore[operator]
    meta = json.loads((tmp_path / "m" / META_FILE).read_text())
    assert meta["hparams"]["learning_rate"] == HParams().learning_rate / 2
    LoadedModel.load(tmp_path / "m")


def test_training_that_keeps_diverging_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rates: list[float] = []

    def diverging(data: object, *, hparams: HParams, **kwargs: object) -> None:
        rates.append(hparams.learning_rate)
        raise NonFiniteLoss(7, math.inf)

    monkeypatch.setattr(engine, "_train", diverging)

    with pytest.raises(NonFiniteLoss):
        train(keyword_rows(20), workdir=tmp_path / "w", out_dir=tmp_path / "m", multi_label=True)
    assert rates == [1.0, 0.5, 0.25, 0.125]


def test_the_threshold_is_chosen_on_the_validation_split(
    tmp_path: Path, rows: LabelledData, quick_hparams: HParams, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[np.ndarray, float]] = []

    def spy(probabilities: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
        chosen = choose_threshold(probabilities, truth)
        seen.append((truth, chosen[0]))
        return chosen

    monkeypatch.setattr(held_out, "choose_threshold", spy)
    result = train(
        rows, workdir=tmp_path / "w", out_dir=tmp_path / "m", hparams=quick_hparams, multi_label=True
    )
    examples = rows.grouped()
    _, validation = multilabel_split(
        examples.label_sets, quick_hparams.validation_fraction, quick_hparams.seed
    )
    expected = [[label in examples.label_sets[i] for label in examples.classes] for i in validation]
    truth, threshold = seen[-1]  # each epoch's validation, then the final choice
    assert truth.tolist() == expected
    assert result.metrics["threshold"] == threshold


def test_without_held_out_scores_the_threshold_is_the_default(
    tmp_path: Path, rows: LabelledData, quick_hparams: HParams
) -> None:
    no_split = dataclasses.replace(
        quick_hparams, min_validation_rows=10_000, min_updates=60, cross_fit_folds=0
    )
    result = train(rows, workdir=tmp_path / "w", out_dir=tmp_path / "m", hparams=no_split, multi_label=True)
    assert result.metrics["evaluated_on"] == "training"
    assert result.metrics["threshold"] == DEFAULT_THRESHOLD
    assert LoadedModel.load(tmp_path / "m").threshold == DEFAULT_THRESHOLD
    meta_file = tmp_path / "m" / META_FILE
    meta = json.loads(meta_file.read_text())
    for odd in (math.nan, 0.0, 1.5):  # every class chosen, or none, whatever the text
        meta_file.write_text(json.dumps(meta | {"threshold": odd}))
        with pytest.raises(CheckpointCorrupt, match="threshold"):
            LoadedModel.load(tmp_path / "m")


def test_small_data_is_scored_by_cross_fitting(tmp_path: Path, quick_hparams: HParams) -> None:
    small = keyword_rows(40)
    hparams = dataclasses.replace(quick_hparams, min_validation_rows=10_000, min_updates=60)
    result = train(small, workdir=tmp_path / "w", out_dir=tmp_path / "m", hparams=hparams, multi_label=True)
    assert result.metrics["evaluated_on"] == "cross-validation"
    assert result.metrics["n"] == len(small.grouped())
    assert result.metrics["threshold"] in THRESHOLDS


def _stop_after(calls: int):
    seen = 0

    def should_stop() -> bool:
        nonlocal seen
        seen += 1
        return seen >= calls

    return should_stop


def test_a_stopped_and_resumed_run_equals_the_uninterrupted_one(
    tmp_path: Path, rows: LabelledData, quick_hparams: HParams
) -> None:
    def fit(where: str, **kwargs: object) -> engine.TrainResult:
        return train(
            rows,
            workdir=tmp_path / f"{where}-work",
            out_dir=tmp_path / where,
            hparams=quick_hparams,
            multi_label=True,
            **kwargs,  # type: ignore[arg-type]
        )

    reference = fit("ref")
    stops = [13, 5, 40]
    applied_when_stopped = []
    for calls in stops:
        with pytest.raises(TrainingStopped) as stopped:
            fit("out", should_stop=_stop_after(calls))
        applied_when_stopped.append(stopped.value.applied_updates)
    resumed = fit("out")

    assert applied_when_stopped == list(itertools.accumulate(stops))
    assert resumed.resumed == len(stops)
    assert resumed.applied_updates == reference.applied_updates
    assert resumed.metrics == reference.metrics
    expected, actual = _weights(tmp_path / "ref"), _weights(tmp_path / "out")
    assert all(torch.equal(expected[k], actual[k]) for k in expected)


def test_a_single_label_checkpoint_is_not_resumed_as_multi_label(
    tmp_path: Path, rows: LabelledData, quick_hparams: HParams
) -> None:
    with pytest.raises(TrainingStopped):
        train(
            rows,
            workdir=tmp_path / "w",
            out_dir=tmp_path / "m",
            hparams=quick_hparams,
            should_stop=lambda: True,
        )
    with pytest.raises(engine.TrainerError, match="different training data"):
        train(rows, workdir=tmp_path / "w", out_dir=tmp_path / "m", hparams=quick_hparams, multi_label=True)


# --- the saved model ----------------------------------------------------------------------

TEXTS = ["rain in paris", "a jazz album", "snow forecast for my flight", "", "çà et là 🙂"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("multilabel-model")
    hparams = HParams(
        batch_size=4,
        min_updates=120,
        max_epochs=4,
        embedding_dim=8,
        validation_fraction=0.2,
        min_validation_rows=5,
    )
    train(keyword_rows(90), workdir=root / "w", out_dir=root / "m", hparams=hparams, multi_label=True)
    return root / "m"


def test_a_loaded_model_scores_each_class_independently_and_applies_its_threshold(model_dir: Path) -> None:
    model = LoadedModel.load(model_dir)
    meta = json.loads((model_dir / META_FILE).read_text())
    assert model.multi_label and meta["multi_label"] is True and meta["format"] == MULTI_LABEL_FORMAT
    assert model.threshold == meta["threshold"] == meta["metrics"]["threshold"]
    results = model.classify(TEXTS)
    for scores in results:
        confidences = [c for _, c in scores]
        assert sorted(label for label, _ in scores) == ["music", "travel", "weather"]
        assert confidences == sorted(confidences, reverse=True)
        assert all(0.0 < c < 1.0 for c in confidences)
    assert not math.isclose(sum(c for _, c in results[0]), 1.0, abs_tol=1e-3)
    assert sorted(model.labels_of(results[0])) == ["travel", "weather"]
    assert model.labels_of(results[1]) == ["music"]
    assert sorted(model.labels_of(results[2])) == ["travel", "weather"]
    for scores in results:
        labels = model.labels_of(scores)
        assert labels == [label for label, c in scores if c >= model.threshold] or labels == [scores[0][0]]


def test_the_top_classes_of_a_multi_label_model_hold_every_label_it_predicts(model_dir: Path) -> None:
    """The batcher asked for every class of a multi-label model to decide its labels; with
    ``top`` each text lists its ``top`` classes, or more if more pass the threshold."""
    model = LoadedModel.load(model_dir)
    whole = model.classify(TEXTS)

    for top in (1, 2):
        ranked = model.classify(TEXTS, top=top)
        for scores, every in zip(ranked, whole, strict=True):
            assert scores == every[: max(top, len(scores))]
            assert model.labels_of(scores) == model.labels_of(every)
            assert len(scores) == max(top, sum(c >= model.threshold for _, c in every))  # type: ignore[operator]


def test_a_bundle_round_trip_gives_identical_confidences(model_dir: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "model.taas"
    with bundle.open("wb") as out:
        write_bundle(model_dir, out)
    loaded, original = LoadedModel.load(bundle), LoadedModel.load(model_dir)
    assert loaded.multi_label and loaded.threshold == original.threshold
    assert loaded.classify(TEXTS) == original.classify(TEXTS)


def test_a_single_label_model_keeps_its_format_and_predicts_its_top_class(
    tmp_path: Path, rows: LabelledData, quick_hparams: HParams
) -> None:
    train(rows, workdir=tmp_path / "w", out_dir=tmp_path / "m", hparams=quick_hparams)
    meta = json.loads((tmp_path / "m" / META_FILE).read_text())
    assert (
        meta["format"] == "taas-text-classifier/1" and "multi_label" not in meta and "threshold" not in meta
    )
    model = LoadedModel.load(tmp_path / "m")
    assert not model.multi_label and model.threshold is None
    scores = model.classify(["rain in paris"])[0]
    assert math.isclose(sum(c for _, c in scores), 1.0, abs_tol=1e-9)
    assert model.labels_of(scores) == [scores[0][0]]


# --- the CLI ------------------------------------------------------------------------------


@pytest.mark.slow
def test_fit_and_eval_in_multi_label_mode(tmp_path: Path) -> None:
    examples = keyword_rows(1100, seed=1)
    train_csv = write_csv(tmp_path / "train.csv", examples)
    test_csv = write_csv(tmp_path / "test.csv", keyword_rows(60, seed=2))
    model = tmp_path / "model"
    fit = subprocess.run(
        [sys.executable, "-m", "trainer", "fit", str(train_csv), "--out", str(model), "--multi-label"]
        + ["--learners", "1"],
        capture_output=True,
        timeout=300,
    )
    assert fit.returncode == 0, fit.stderr
    summary = json.loads(fit.stdout)["metrics"]
    assert set(summary) == {"micro_f1", "macro_f1", "hamming_loss", "subset_accuracy", "n", "threshold"} | {
        "evaluated_on"
    }
    assert summary["evaluated_on"] == "validation"
    assert summary["n"] == round(0.1 * len(examples.grouped())) >= 100
    evaluated = subprocess.run(
        [sys.executable, "-m", "trainer", "eval", str(model), str(test_csv)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert evaluated.returncode == 0, evaluated.stderr
    result = json.loads(evaluated.stdout)
    assert result["n"] == len(keyword_rows(60, seed=2).grouped()) and result["micro_f1"] >= 0.95
    assert result["threshold"] == summary["threshold"]
    assert {"macro_f1", "hamming_loss", "subset_accuracy", "micro_precision", "macro_recall"} <= set(result)
