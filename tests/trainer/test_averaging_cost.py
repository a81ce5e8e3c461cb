"""benchmarks/averaging_cost.py times the averaging itself: its instrumentation counts only the
averaged runs' IterateSum work and leaves IterateSum as it found it."""

from __future__ import annotations

import dataclasses

from synthetic import synthetic_data

from benchmarks.averaging_cost import compare
from trainer.averaging import IterateSum
from trainer.hparams import HParams


def test_the_averaging_is_timed_in_the_averaged_runs_only(quick_hparams: HParams) -> None:
    add, mean_in = IterateSum.add, IterateSum.mean_in
    hparams = dataclasses.replace(quick_hparams, average_snapshots=4, cross_fit_folds=0)

    row = compare("tiny", synthetic_data(10), hparams, repeats=2, learners=1)

    averaged, last = row["averaged"], row["last_iterate"]
    assert isinstance(averaged, dict) and isinstance(last, dict)
    assert averaged["averaging_s"] > 0 and last["averaging_s"] < averaged["averaging_s"]
    assert len(averaged["epochs"]) == len(last["epochs"]) == 2
    assert 0 < row["averaging_share"] < 1  # type: ignore[operator]
    assert (IterateSum.add, IterateSum.mean_in) == (add, mean_in)
