"""Data of many classes with a few rows each is learned (benchmarks/many_classes.py, run as a
user runs it). Until the ninth session such data trained without error and stayed near chance:
the model started at a saddle and early stopping saw no better accuracy in time."""

from __future__ import annotations

import pytest
from benchmark_runs import run_benchmark


@pytest.mark.slow
def test_250_classes_of_6_rows_each_are_learned() -> None:
    row = run_benchmark("many_classes.py", "250x6")[-1]

    assert row["set"] == "250x6"
    assert row["centroid"] >= 0.95  # the signal is plain: a gap is the trainer's
    # 0.956 measured; 0.844 with the old start (both factors uniform in ±1/64)
    assert row["accuracy"] >= 0.9, row
