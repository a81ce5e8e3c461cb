"""benchmarks/step_bench.py, run as a user runs it: per dataset, both tasks' step and job
figures and the speedups between them."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchmark_runs import run_benchmark
from synthetic import synthetic_data, write_csv


@pytest.mark.slow
def test_each_dataset_gets_both_tasks_step_and_job_figures(tmp_path: Path) -> None:
    folder = tmp_path / "tiny-intents"
    folder.mkdir()
    write_csv(folder / "train.csv", synthetic_data(15, seed=1))

    lines = run_benchmark("step_bench.py", str(folder), "--steps=40", "--rounds=1")

    assert len(lines) == 1
    line = lines[0]
    assert line["dataset"] == "tiny-intents"
    for figure in ("step_us", "job_s"):
        timings = line[figure]
        assert isinstance(timings, dict) and set(timings) == {"closed_form", "autograd"}
        assert all(value > 0 for value in timings.values())
    speedup = line["speedup"]
    assert isinstance(speedup, dict)
    assert speedup["step"] == pytest.approx(
        line["step_us"]["autograd"] / line["step_us"]["closed_form"], rel=0.02
    )
    assert speedup["job"] == pytest.approx(line["job_s"]["autograd"] / line["job_s"]["closed_form"], rel=0.02)
