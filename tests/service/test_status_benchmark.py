"""benchmarks/status_bench.py as a user runs it."""

from __future__ import annotations

from service.api.compression import LEVEL
from tests.trainer.benchmark_runs import run_benchmark


def test_it_reports_each_class_counts_bytes_and_gzip_levels() -> None:
    lines = run_benchmark("status_bench.py", "--classes", "30", "300", "--repeats", "1")

    assert [line["classes"] for line in lines] == [30, 300]
    for line in lines:
        levels = [line[name] for name in ("level1", f"level{LEVEL}_api", "level9")]
        assert all(0 < level["bytes"] < line["bytes"] for level in levels)  # type: ignore[index, operator]
        assert levels[2]["bytes"] <= levels[0]["bytes"]  # type: ignore[index]
    assert lines[1]["bytes"] > lines[0]["bytes"]  # type: ignore[operator]
