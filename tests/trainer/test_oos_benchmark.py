"""benchmarks/oos.py: its figures counted the HINT3 way, and the script run as a user runs it,
with an oos_test.csv and by leaving classes out."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from benchmark_runs import run_benchmark
from synthetic import synthetic_data, write_csv

from benchmarks.oos import SYSTEMS, cases, measure
from trainer import LabelledData


def test_figures_at_the_threshold_count_rejected_texts_as_oos() -> None:
    truth = ["a", "a", "b", "oos", "oos"]
    predicted = ["a", "b", "b", "a", "b"]
    confidence = np.array([0.9, 0.8, 0.3, 0.2, 0.7])

    row = measure(truth, predicted, confidence, threshold=0.5)

    # rejected: the 0.3 (in scope, right until rejected) and the 0.2 (out of scope)
    assert row["oos_recall"] == 0.5 and row["oos_precision"] == 0.5
    assert row["in_scope_accuracy"] == pytest.approx(1 / 3)
    assert row["in_scope_accuracy_lost"] == pytest.approx(1 / 3)  # 2/3 right with no threshold
    assert row["in_scope_rejected"] == pytest.approx(1 / 3)
    assert row["auroc"] == pytest.approx(5 / 6)  # 5 of the 6 (in, out) pairs ranked right
    assert row["best_mcc"] >= row["mcc"]


def test_a_folder_of_two_classes_has_no_case_of_classes_left_out(tmp_path: Path) -> None:
    two = LabelledData(["rain", "snow", "jazz", "rock"], ["weather", "weather", "music", "music"])
    for name in ("train.csv", "test.csv"):
        write_csv(tmp_path / name, two)

    assert cases(tmp_path, repeats=5) == []  # one class left: nothing to tell apart


def _digits(rows: int) -> LabelledData:
    """Texts of digits: no word or character n-gram of synthetic_data's."""
    rng = random.Random(3)
    return LabelledData(
        [f"{rng.randrange(10**6)} {rng.randrange(10**6)}" for _ in range(rows)], ["oos"] * rows
    )


@pytest.mark.slow
def test_both_protocols_report_every_system(tmp_path: Path) -> None:
    with_oos, without = tmp_path / "with-oos", tmp_path / "classes-left-out"
    for folder in (with_oos, without):
        folder.mkdir()
        write_csv(folder / "train.csv", synthetic_data(15, seed=1))
        write_csv(folder / "test.csv", synthetic_data(5, seed=2))
    write_csv(with_oos / "oos_test.csv", _digits(10))

    lines = run_benchmark(
        "oos.py",
        str(with_oos),
        str(without),
        "--json",
        "--repeats=2",
        "--language=xx",
        "--set=cross_fit_folds=2",  # held-out scores, which taas's in-scope score is set on
    )

    rows = {(row["dataset"], row["system"]): row for row in lines}
    systems = SYSTEMS
    assert set(rows) == {(d, s) for d in ("with-oos", "classes-left-out") for s in systems}
    for (dataset, _), row in rows.items():
        assert row["cases"] == (1 if dataset == "with-oos" else 2)
        for key in (
            "auroc",
            "oos_recall",
            "oos_precision",
            "in_scope_accuracy",
            "in_scope_rejected",
            "best_mcc",
        ):
            assert 0.0 <= row[key] <= 1.0, (dataset, key)
        assert -1.0 <= row["mcc"] <= row["best_mcc"]
    for system in systems:  # texts with nothing in common with the classes' rank below them all
        assert rows["with-oos", system]["auroc"] >= 0.9, system
