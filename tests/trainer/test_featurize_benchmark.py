"""benchmarks/featurize_bench.py as a user runs it, on a small folder of its own."""

from __future__ import annotations

import csv
from pathlib import Path

from benchmark_runs import run_benchmark

ROWS = [
    ("play some jazz please", "music"),
    ("put on the new album by Adele", "music"),
    ("will it rain in München tomorrow", "weather"),
    ("how hot is it outside", "weather"),
    ("book a table for two tonight", "restaurant"),
    ("reserve a table at an Italian place", "restaurant"),
    ("日本の天気はどうですか", "weather"),
]


def test_it_checks_and_times_transform_and_fit_against_their_baselines(tmp_path: Path) -> None:
    for name, rows in (("train.csv", ROWS * 20), ("test.csv", ROWS * 5)):  # a batch of 30 needs 30
        with (tmp_path / name).open("w", newline="") as out:
            csv.writer(out).writerows([("text", "label"), *rows])

    (report,) = run_benchmark("featurize_bench.py", str(tmp_path), "--rounds", "1")

    assert {(r["impl"], r["batch"], r["cache"]) for r in report["results"]} == {  # type: ignore[union-attr]
        (impl, batch, cache)
        for impl in ("new", "baseline")
        for batch in (1, 30)
        for cache in ("warm", "cold")
    }
    fit = report["fit"]  # it exits 1 unless both fits give the same buckets and IDF
    assert fit["texts"] == len(ROWS) * 20  # type: ignore[index]
    assert fit["new_s"] > 0 and fit["baseline_s"] > 0 and fit["speedup"] > 0  # type: ignore[index]
