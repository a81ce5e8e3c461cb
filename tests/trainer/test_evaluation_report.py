"""The evaluation report's figures, checked by hand on small answers, and on a trained model."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.service.helpers import train_tiny_model
from trainer.data import OUT_OF_SCOPE_CLASS, LabelledData
from trainer.engine import train
from trainer.evaluation_report import (
    EXAMPLES_PER_PAIR,
    Answers,
    evaluate_model,
    multi_label_report,
    single_label_report,
)
from trainer.hparams import HParams
from trainer.inference import LoadedModel

TEXTS = ["a1", "a2", "a3", "b1", "b2", "c1", "o1", "o2"]
LABELS = ["a", "a", "a", "b", "b", "c", OUT_OF_SCOPE_CLASS, OUT_OF_SCOPE_CLASS]
ANSWERS = Answers(
    predicted=["a", "b", "b", "b", "a", "a", "a", "b"],
    confidence=[0.95, 0.55, 0.65, 0.92, 0.35, 0.81, 0.5, 0.9],
    in_scope=[0.9, 0.01, 0.5, 0.6, 0.3, 0.7, 0.01, 0.4],
    rate=0.02,
)


def test_the_figures_are_those_of_the_in_scope_rows_and_the_pairs_most_confused_come_first() -> None:
    report = single_label_report(TEXTS, LABELS, ANSWERS, classes=["a", "b"])

    assert (report["rows"], report["n"]) == (8, 6)  # the out-of-scope rows have no right class
    assert report["accuracy"] == pytest.approx(2 / 6)
    rows = {row["class_name"]: row for row in report["per_class"]}
    assert rows["a"] == pytest.approx(
        {"class_name": "a", "precision": 1 / 3, "recall": 1 / 3, "f1": 1 / 3, "support": 3, "predicted": 3}
    )
    assert rows["b"]["precision"] == pytest.approx(1 / 3) and rows["b"]["recall"] == pytest.approx(1 / 2)
    assert rows["c"]["f1"] == 0.0 and rows["c"]["predicted"] == 0
    assert report["macro_f1"] == pytest.approx((1 / 3 + 0.4 + 0) / 3)
    assert report["unknown_classes"] == [{"class_name": "c", "rows": 1}]
    pairs = [(p["true_class"], p["predicted_class"], p["rows"]) for p in report["confused_pairs"]]
    assert pairs == [("a", "b", 2), ("b", "a", 1), ("c", "a", 1)]
    assert [x["text"] for x in report["confused_pairs"][0]["examples"]] == ["a2", "a3"]
    assert len(report["confused_pairs"][0]["examples"]) <= EXAMPLES_PER_PAIR

    bins = {(b["lower"], b["upper"]): b for b in report["calibration"]["bins"]}
    assert sum(b["rows"] for b in bins.values()) == 6
    assert bins[(0.9, 1.0)] == pytest.approx(
        {"lower": 0.9, "upper": 1.0, "rows": 2, "confidence": 0.935, "accuracy": 1.0}
    )
    # ECE: |accuracy - confidence| of each bin, weighed by its share of the rows
    expected = (2 * abs(1 - 0.935) + abs(0 - 0.55) + abs(0 - 0.65) + abs(0 - 0.35) + abs(0 - 0.81)) / 6
    assert report["calibration"]["ece"] == pytest.approx(expected)

    assert report["out_of_scope"] == {
        "rate": 0.02,
        "in_scope_rows": 6,
        "rejected_in_scope": 1,  # a2 at 0.01
        "false_rejection_rate": pytest.approx(1 / 6),
        "out_of_scope_rows": 2,
        "caught": 1,  # o1 at 0.01; o2 at 0.4 passed for in scope
        "recall": 0.5,
    }


def test_a_model_without_out_of_scope_detection_reports_none() -> None:
    plain = Answers(ANSWERS.predicted, ANSWERS.confidence)
    assert single_label_report(TEXTS, LABELS, plain, classes=["a", "b"])["out_of_scope"] is None
    with pytest.raises(ValueError, match="differ in length"):
        single_label_report(TEXTS[:3], LABELS, plain, classes=["a"])


def test_a_multi_label_report_has_the_pooled_figures_and_the_threshold() -> None:
    report = multi_label_report(
        ["x", "y"], [("a", "b"), ("b",)], [["a"], ["b", "c"]], classes=["a", "b", "c"], threshold=0.4
    )
    assert report["multi_label"] and report["threshold"] == 0.4 and report["rows"] == 2
    assert report["micro_f1"] == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
    assert report["subset_accuracy"] == 0.0
    assert [row["class_name"] for row in report["per_class"]] == ["a", "b", "c"]


def test_a_trained_model_answers_in_chunks_and_reports_its_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = LoadedModel.load(train_tiny_model(tmp_path))
    monkeypatch.setattr("trainer.evaluation_report.CHUNK", 5)
    texts = ["how hot is it", "is it raining", "will it snow", "what is the temperature"] * 3
    labels = ["temperature", "conditions", "conditions", "temperature"] * 3
    seen: list[tuple[int, int]] = []
    report = evaluate_model(
        model, LabelledData(texts, labels), progress=lambda done, total: seen.append((done, total))
    )
    assert seen == [(5, 12), (10, 12), (12, 12)]
    assert report["n"] == 12 and report["accuracy"] == pytest.approx(1.0)  # its own training texts
    assert (report["out_of_scope"] is None) == (model.in_scope is None)


def test_a_multi_label_model_is_scored_on_the_rows_grouped_by_text(
    tmp_path: Path, quick_hparams: HParams
) -> None:
    texts = [f"{w} {n}" for n in range(6) for w in ("rain snow", "rain", "snow")]
    rows = [(t, label) for t in texts for label in ("rain", "snow") if label in t]
    result = train(
        LabelledData([t for t, _ in rows], [label for _, label in rows]),
        workdir=tmp_path / "w",
        out_dir=tmp_path / "m",
        hparams=quick_hparams,
        multi_label=True,
    )
    model = LoadedModel.load(result.model_dir)
    seen: list[tuple[int, int]] = []
    report = evaluate_model(
        model,
        LabelledData(["rain snow 9", "rain snow 9", "rain 9"], ["rain", "snow", "rain"]),
        progress=lambda done, total: seen.append((done, total)),
    )
    assert report["multi_label"] and report["rows"] == 2 and seen == [(2, 2)]  # two distinct texts
    assert report["threshold"] == model.threshold
    assert [c["class_name"] for c in report["per_class"]] == ["rain", "snow"]
    assert report["per_class"][0]["support"] == 2 and report["unknown_classes"] == []
