"""benchmarks/ops_bench.py as a user runs it."""

from __future__ import annotations

from tests.trainer.benchmark_runs import run_benchmark


def test_it_times_the_overview_and_the_scrape_cold_and_warm() -> None:
    lines = run_benchmark("ops_bench.py", "--jobs", "40", "--points", "30", "--repeats", "1")

    assert [line["read"] for line in lines] == ["overview", "scrape"]
    for line in lines:
        assert (line["jobs"], line["points"]) == (40, 30)
        assert line["cold_ms"] > 0 and line["warm_ms"] > 0  # type: ignore[operator]
    assert lines[1]["bytes"] > 0  # type: ignore[operator]
