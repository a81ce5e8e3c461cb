"""The engine with K > 1 learner processes: exactly-once accounting, learner deaths, stop and resume.

Runs without early stopping (no validation split) so that the number of applied updates is
fixed by the plan: every epoch, each learner takes ceil(|its shard| / batch) steps.
"""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import os
import random
import signal
from pathlib import Path

import pytest
from synthetic import synthetic_data
from torch.multiprocessing.reductions import shared_cache

from trainer.data import LabelledData
from trainer.engine import Progress, train
from trainer.errors import TrainingStopped
from trainer.hparams import HParams
from trainer.learner_count import auto_learners, default_learners
from trainer.ps import pool
from trainer.ps.pool import ProcessPool

pytestmark = pytest.mark.timeout(120)


def planned_updates(rows: int, hparams: HParams, learners: int) -> int:
    """Updates of a run with no early stopping: every epoch, each learner's ceil(shard / batch)."""
    per_epoch = sum(math.ceil(len(range(r, rows, learners)) / hparams.batch_size) for r in range(learners))
    return hparams.max_epochs * per_epoch


@pytest.fixture
def fixed_plan() -> HParams:
    """No validation split (so no early stopping), 30 epochs of 60 rows in batches of 4."""
    return HParams(
        batch_size=4,
        min_updates=0,
        max_epochs=30,
        min_validation_rows=10**9,
        embedding_dim=8,
        checkpoint_every_updates=50,
        checkpoint_every_seconds=3600.0,
        progress_every_seconds=0.0,
    )


@pytest.mark.parametrize(("bound", "learners"), [(None, 2), (0, 2), (1, 2), (1, 3)])
def test_learners_apply_every_pushed_gradient_exactly_once_within_the_bound(
    tmp_path: Path, small_data: LabelledData, fixed_plan: HParams, bound: int | None, learners: int
) -> None:
    """Three learners land their gradients in stripes (trainer.ps.stripes.default_stripes)."""
    seen: list[Progress] = []
    result = train(
        small_data,
        workdir=tmp_path / "w",
        out_dir=tmp_path / "m",
        hparams=dataclasses.replace(fixed_plan, staleness_bound=bound),
        learners=learners,
        on_progress=seen.append,
    )
    expected = planned_updates(len(small_data), fixed_plan, learners)
    assert result.learners == learners
    assert result.applied_updates == expected
    assert result.ps["applied"] == result.ps["pushed"] == expected
    histogram: list[int] = result.ps["staleness_histogram"]  # type: ignore[assignment]
    assert sum(histogram) == expected
    if bound is not None:  # buckets 0, 1, 2, 3 are exact staleness values
        assert sum(histogram[bound + 1 :]) == 0, histogram
    assert seen[-1].learners == learners and seen[-1].ps is not None and seen[-1].ps["applied"] == expected
    assert result.metrics["accuracy"] >= 0.9  # type: ignore[operator]


@pytest.mark.slow
@pytest.mark.parametrize(("bound", "learners"), [(None, 2), (0, 2), (None, 3)])
def test_a_sigkilled_learner_is_replaced_and_no_update_is_lost_or_repeated(
    tmp_path: Path, small_data: LabelledData, fixed_plan: HParams, bound: int | None, learners: int
) -> None:
    """With a bound of 0 the survivor is usually waiting for the killed learner's gradient.
    Three learners land their gradients in stripes (trainer.ps.stripes.default_stripes)."""
    killed: list[int] = []

    def kill_a_learner(progress: Progress) -> None:
        if not killed and progress.phase == "training" and progress.step >= 120:
            learners = [p for p in multiprocessing.active_children() if p.name.startswith("taas-learner-")]
            os.kill(learners[0].pid, signal.SIGKILL)  # type: ignore[arg-type]
            killed.append(progress.step)

    result = train(
        small_data,
        workdir=tmp_path / "w",
        out_dir=tmp_path / "m",
        # no fold processes (trainer.folds) beside the learners: this is about the learners
        hparams=dataclasses.replace(fixed_plan, staleness_bound=bound, cross_fit_folds=0),
        learners=learners,
        on_progress=kill_a_learner,
    )
    assert killed, "the run ended before a learner could be killed"
    # respawned at its cursor, or (had it died holding the apply role) restarted from a checkpoint
    assert result.ps["respawns"] == 1 or result.resumed == 1
    expected = planned_updates(len(small_data), fixed_plan, learners)
    assert result.applied_updates == expected
    assert result.ps["applied"] == result.ps["pushed"] == expected


@pytest.mark.slow
@pytest.mark.parametrize("bound", [None, 0])  # 0: the other learner waits at the gate for it
def test_a_hung_learner_fails_its_session_which_restarts_from_the_checkpoint(
    tmp_path: Path,
    small_data: LabelledData,
    fixed_plan: HParams,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    bound: int | None,
) -> None:
    """A SIGSTOPped learner held its round for ever: no update, no checkpoint, the lease renewed
    (so no other worker took the job), and not even a cancel freed the worker."""
    monkeypatch.setattr(pool, "_PARK_TIMEOUT_S", 3.0)
    stopped: list[int] = []

    def stop_a_learner(progress: Progress) -> None:
        if not stopped and progress.phase == "training" and progress.step >= 120:
            learners = [p for p in multiprocessing.active_children() if p.name.startswith("taas-learner-")]
            os.kill(learners[0].pid, signal.SIGSTOP)  # type: ignore[arg-type]
            stopped.append(learners[0].pid)  # type: ignore[arg-type]

    result = train(
        small_data,
        workdir=tmp_path / "w",
        out_dir=tmp_path / "m",
        hparams=dataclasses.replace(fixed_plan, staleness_bound=bound, cross_fit_folds=0),
        learners=2,
        on_progress=stop_a_learner,
    )

    assert stopped and "made no progress for 3 s (hung" in caplog.text
    assert result.resumed == 1  # a new session, from the last checkpoint
    expected = planned_updates(len(small_data), fixed_plan, 2)
    assert result.applied_updates == expected
    assert not [p for p in multiprocessing.active_children() if p.pid in stopped]


@pytest.mark.slow
def test_a_learner_killed_after_the_last_round_costs_the_job_nothing(
    tmp_path: Path,
    small_data: LabelledData,
    fixed_plan: HParams,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every learner has parked and the slots are drained when the pool closes: a learner
    lost then (the OOM killer, a kill) leaves complete parameters, so the job finishes."""
    close = ProcessPool.close

    def kill_one_then_close(pool: ProcessPool) -> list[int | None]:
        victim = pool.procs[0]
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(timeout=10)
        return close(pool)

    monkeypatch.setattr(ProcessPool, "close", kill_one_then_close)
    result = train(
        small_data,
        workdir=tmp_path / "w",
        out_dir=tmp_path / "m",
        hparams=dataclasses.replace(fixed_plan, cross_fit_folds=0),
        learners=2,
    )
    expected = planned_updates(len(small_data), fixed_plan, 2)
    assert result.applied_updates == result.ps["applied"] == result.ps["pushed"] == expected
    assert result.resumed == 0 and result.ps["respawns"] == 0
    assert (tmp_path / "m" / "weights.pt").is_file()
    assert f"exit codes [{-signal.SIGKILL}, 0]" in caplog.text


@pytest.mark.slow
def test_a_stopped_two_learner_run_resumes_to_the_planned_update_count(
    tmp_path: Path, small_data: LabelledData, fixed_plan: HParams
) -> None:
    calls = 0

    def stop_soon() -> bool:
        nonlocal calls
        calls += 1
        return calls >= 3

    with pytest.raises(TrainingStopped) as stopped:
        train(
            small_data,
            workdir=tmp_path / "w",
            out_dir=tmp_path / "m",
            hparams=fixed_plan,
            learners=2,
            should_stop=stop_soon,
        )
    resumed = train(
        small_data, workdir=tmp_path / "w", out_dir=tmp_path / "m", hparams=fixed_plan, learners=7
    )
    expected = planned_updates(len(small_data), fixed_plan, 2)
    assert 0 < stopped.value.applied_updates < expected
    assert resumed.resumed == 1 and resumed.learners == 2  # the checkpoint's K wins
    assert resumed.applied_updates == expected
    assert resumed.ps["applied"] == resumed.ps["pushed"] == expected


def test_no_more_learners_start_than_an_epoch_has_mini_batches(tmp_path: Path, fixed_plan: HParams) -> None:
    """12 rows in batches of 4: 8 learners would split each epoch into 8 steps of a row or two,
    doubling the plan's updates; 3 train it as K = 1 would, in 3 steps an epoch."""
    hparams = dataclasses.replace(fixed_plan, cross_fit_folds=0, max_epochs=5)

    result = train(
        synthetic_data(4), workdir=tmp_path / "w", out_dir=tmp_path / "m", hparams=hparams, learners=8
    )

    assert result.learners == 3
    assert result.applied_updates == planned_updates(12, hparams, 1) == 15


def test_two_learners_train_long_texts_of_a_small_vocabulary(tmp_path: Path, fixed_plan: HParams) -> None:
    """A batch of such texts pushes (under SGD, repeats and all) more rows than the vocabulary
    has; the slots were sized to the vocabulary, and every learner died on its first push."""
    rng = random.Random(0)
    texts = [
        " ".join(rng.choice("abcde") for _ in range(60)) + (" aaa" if i % 2 else " bbb") for i in range(40)
    ]
    data = LabelledData(texts, ["A" if i % 2 else "B" for i in range(40)])

    result = train(
        data,
        workdir=tmp_path / "w",
        out_dir=tmp_path / "m",
        hparams=dataclasses.replace(fixed_plan, cross_fit_folds=0),
        learners=2,
    )

    assert result.learners == 2 and result.ps["respawns"] == 0
    assert result.applied_updates == planned_updates(len(data), fixed_plan, 2)


def test_a_two_learner_run_leaves_no_freed_storage_in_torchs_shared_cache(
    tmp_path: Path, small_data: LabelledData, fixed_plan: HParams
) -> None:
    """Handing the learners their tensors records every storage in torch's shared_cache under
    a weak reference; once the run freed them, 16 expired entries a run stayed until torch's own
    sweep at 128, each keeping a freed tensor's heap block from reuse (a worker's memory grew
    by the parameters' size at every K > 1 job: trainer.ps.pool.forgetting_freed_storages)."""
    hparams = dataclasses.replace(fixed_plan, cross_fit_folds=0)
    for run in ("first", "second"):
        train(
            small_data, workdir=tmp_path / run, out_dir=tmp_path / f"{run}-model", hparams=hparams, learners=2
        )

    assert [key for key, ref in list(shared_cache.items()) if ref.expired()] == []


def test_the_progress_total_is_the_updates_the_learners_make(tmp_path: Path, fixed_plan: HParams) -> None:
    """Three shards of 40 rows take 4 + 4 + 4 batches of 4 an epoch, not ceil(40 / 4) = 10:
    the reports counted past their total (22,520 of 22,500 on 20,000 rows)."""
    data = LabelledData([f"text {i} {'aaa' if i % 2 else 'bbb'}" for i in range(40)], ["A", "B"] * 20)
    seen: list[Progress] = []

    result = train(
        data,
        workdir=tmp_path / "w",
        out_dir=tmp_path / "m",
        hparams=dataclasses.replace(fixed_plan, cross_fit_folds=0),
        learners=3,
        on_progress=seen.append,
    )

    assert result.applied_updates == planned_updates(40, fixed_plan, 3) == fixed_plan.max_epochs * 12
    assert {p.total_steps for p in seen if p.phase == "training"} == {result.applied_updates}


def test_zero_learners_means_one_per_core_unless_the_data_is_too_small() -> None:
    cores = len(os.sched_getaffinity(0))
    assert default_learners() == cores
    assert auto_learners(steps_per_epoch=10_000) == cores
    assert auto_learners(steps_per_epoch=7) == 1
