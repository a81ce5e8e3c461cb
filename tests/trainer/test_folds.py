"""FoldRuns: every fold's result in fold order from processes of their own; a fold's error,
a dead process and a stop reach the caller."""

from __future__ import annotations

import functools
import os
import tempfile
import time
from pathlib import Path

import pytest

from trainer.errors import NonFiniteLoss, TrainerError, TrainingStopped
from trainer.folds import FoldRuns


def _square(fold: int) -> int:
    return fold * fold


def _non_finite_on_two(fold: int) -> int:
    if fold == 2:
        raise NonFiniteLoss(7, float("inf"))
    return fold


class _Unpicklable(Exception):
    def __init__(self, a: int, b: int) -> None:
        super().__init__(f"{a} and {b}")


def _unpicklable_on_zero(fold: int) -> int:
    raise _Unpicklable(1, 2)


def _dies_on_one(fold: int) -> int:
    if fold == 1:
        os._exit(3)
    return fold


def _sleeps(fold: int) -> int:
    time.sleep(60)
    return fold


def _sleeps_in_a_temporary_directory(parent: str, fold: int) -> int:
    with tempfile.TemporaryDirectory(prefix="taas-fold-", dir=parent):
        time.sleep(60)
    return fold


def test_results_come_in_fold_order_from_fewer_processes_than_folds() -> None:
    runs = FoldRuns(_square, 5, 2)

    assert len(runs.procs) == 2
    assert runs.results(lambda: False) == [0, 1, 4, 9, 16]


def test_a_folds_trainer_error_is_raised_as_itself() -> None:
    with pytest.raises(NonFiniteLoss) as raised:
        FoldRuns(_non_finite_on_two, 3, 3).results(lambda: False)

    assert (raised.value.step, raised.value.loss) == (7, float("inf"))


def test_an_error_that_does_not_pickle_arrives_as_a_trainer_error_naming_it() -> None:
    with pytest.raises(TrainerError, match="cross-fitting: _Unpicklable: 1 and 2"):
        FoldRuns(_unpicklable_on_zero, 1, 1).results(lambda: False)


def test_a_process_that_dies_is_a_trainer_error_naming_its_folds() -> None:
    # two processes: folds 0 and 2 in one, 1 and 3 in the other, which dies at fold 1
    with pytest.raises(TrainerError, match=r"before folds \[1, 3\] \(exit codes \[0, 3\]\)"):
        FoldRuns(_dies_on_one, 4, 2).results(lambda: False)


def test_a_stop_terminates_the_processes_and_raises_training_stopped() -> None:
    runs = FoldRuns(_sleeps, 2, 2)
    started = time.monotonic()

    with pytest.raises(TrainingStopped):
        runs.results(lambda: time.monotonic() - started > 0.5)

    assert [proc.is_alive() for proc in runs.procs] == [False, False]


def test_a_stopped_fold_removes_its_temporary_directory(tmp_path: Path) -> None:
    """Every cancel, delete or fair-share yield of a cross-fitting job left its folds'
    taas-fold-* directories (a model among them) in the temporary folder."""
    runs = FoldRuns(functools.partial(_sleeps_in_a_temporary_directory, str(tmp_path)), 2, 2)
    deadline = time.monotonic() + 30
    while len(os.listdir(tmp_path)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(os.listdir(tmp_path)) == 2

    with pytest.raises(TrainingStopped):
        runs.results(lambda: True)

    assert os.listdir(tmp_path) == []
