"""benchmarks/ps_bench.py's ``--json`` report, run as a user runs it: every mode's rate side by
side, and for the parameter server the apply role's busy share, the figure that says how far
more learners can take it."""

from __future__ import annotations

import pytest
import torch
from benchmark_runs import run_benchmark, run_script


@pytest.mark.slow
def test_the_report_gives_each_modes_rate_and_the_apply_roles_busy_share() -> None:
    (report,) = run_benchmark(
        "ps_bench.py", "--json", "--learners", "2", "--models", "sparse", "--batches", "4",
        "--modes", "single,ps,bounded", "--seconds", "0.3",
    )  # fmt: skip

    assert report["learners"] == 2
    rows = {row["mode"]: row for row in report["results"]}
    assert set(rows) == {"single", "ps", "bounded"}
    assert all(row["samples_per_s"] > 0 for row in rows.values())
    assert "apply_busy" not in rows["single"]  # no server, no apply role
    for mode in ("ps", "bounded"):
        assert 0 < rows[mode]["apply_busy"] <= 1, rows[mode]


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="this machine has CUDA: test_ps_cuda.py runs the benchmark"
)
def test_the_cuda_benchmark_says_so_where_there_is_no_cuda() -> None:
    ran = run_script("ps_cuda_bench.py", "--json")
    assert ran.returncode == 2
    assert "no CUDA device" in ran.stderr and not ran.stdout
