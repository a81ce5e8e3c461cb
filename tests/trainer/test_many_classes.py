"""Data of many classes with a few rows each is learned (benchmarks/many_classes.py, run as a
user runs it). Until the ninth session such data trained without error and stayed near chance:
the model started at a saddle and early stopping saw no better accuracy in time. Until the
twenty-third, K asynchronous learners learned it worse than one: each step was divided by its
staleness, which K learners taking turns make about K - 1 (trainer.ps.optimizer.staleness_scale)."""

from __future__ import annotations

import pytest
from benchmark_runs import run_benchmark


@pytest.mark.slow
def test_1000_classes_of_6_rows_each_are_learned_by_one_learner_and_by_eight() -> None:
    one, eight = run_benchmark("many_classes.py", "1000x6", "--learners", "1,8")

    assert (one["set"], one["learners"], eight["learners"]) == ("1000x6", 1, 8)
    assert one["centroid"] >= 0.95  # the signal is plain: a gap is the trainer's
    # 0.935 measured; near chance with the old start (both factors uniform in ±1/64)
    assert one["accuracy"] >= 0.9, one
    # 0.922 measured; 0.79 when every step was divided by its staleness (about K - 1 = 7)
    assert eight["accuracy"] >= one["accuracy"] - 0.05, (one, eight)
