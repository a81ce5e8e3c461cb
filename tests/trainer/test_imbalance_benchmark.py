"""benchmarks/imbalance.py, run as a user runs it: one JSON line per system, each class of each
split cut in turn, the variants and the peers paired with taas on the rare class's rows."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchmark_runs import run_benchmark
from synthetic import synthetic_data, write_csv


@pytest.mark.slow
def test_each_class_in_turn_is_cut_and_every_system_is_reported(tmp_path: Path) -> None:
    folder = tmp_path / "tiny-intents"
    folder.mkdir()
    write_csv(folder / "train.csv", synthetic_data(15, seed=1))

    lines = run_benchmark(
        "imbalance.py",
        str(folder),
        "--rare-rows=2",
        "--folds=3",
        "--set=cross_fit_folds=0",
        "--variant=plain:class_balance=0",
    )

    rows = {row["system"]: row for row in lines}
    assert set(rows) == {"taas", "plain", "tfidf-logreg", "tfidf-svm"}
    for system, row in rows.items():
        assert row["dataset"] == "tiny-intents" and row["rare_rows"] == 2
        assert row["runs"] == 3  # one split (--per-repeat 1), each of the three classes cut
        assert 0.0 <= row["rare_recall"] <= 1.0 and 0.0 <= row["accuracy"] <= 1.0
        assert ("wins" in row) == (system != "taas"), system
    assert rows["tfidf-svm"]["ece"] is None
