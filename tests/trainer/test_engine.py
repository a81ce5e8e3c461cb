from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import pytest
import torch

from trainer import session
from trainer.data import LabelledData
from trainer.engine import Progress, train
from trainer.errors import InvalidTrainingData, TrainerError, TrainingStopped
from trainer.hparams import DEFAULT_HPARAMS, HParams
from trainer.inference import WEIGHTS_FILE


def _weights(model_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(model_dir / WEIGHTS_FILE, weights_only=True)


def _stop_after(calls: int):
    seen = 0

    def should_stop() -> bool:
        nonlocal seen
        seen += 1
        return seen >= calls

    return should_stop


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("stops", [[7], [13, 5, 40]], ids=["once-mid-epoch", "three-times"])
def test_stopped_and_resumed_run_equals_the_uninterrupted_one(
    tmp_path: Path, small_data: LabelledData, quick_hparams: HParams, stops: list[int], optimizer: str
) -> None:
    # patience: no early stop before the third stop, 58 updates in (Adam stops at 36)
    quick_hparams = dataclasses.replace(quick_hparams, optimizer=optimizer, patience=10)
    reference = train(
        small_data, workdir=tmp_path / "ref-work", out_dir=tmp_path / "ref", hparams=quick_hparams
    )

    applied_when_stopped = []
    for calls in stops:
        with pytest.raises(TrainingStopped) as stopped:
            train(
                small_data,
                workdir=tmp_path / "work",
                out_dir=tmp_path / "out",
                hparams=quick_hparams,
                should_stop=_stop_after(calls),
            )
        applied_when_stopped.append(stopped.value.applied_updates)
    resumed = train(small_data, workdir=tmp_path / "work", out_dir=tmp_path / "out", hparams=quick_hparams)

    assert applied_when_stopped == list(itertools.accumulate(stops))
    assert resumed.resumed == len(stops)
    assert resumed.applied_updates == reference.applied_updates
    assert resumed.epochs == reference.epochs
    assert resumed.metrics == reference.metrics
    expected, actual = _weights(tmp_path / "ref"), _weights(tmp_path / "out")
    assert expected.keys() == actual.keys()
    for key in expected:
        assert torch.equal(expected[key], actual[key]), key


def test_hyper_parameters_saved_before_the_optimizer_was_a_field_are_read_as_adam() -> None:
    """Checkpoints of that time hold Adam's moments and its learning rate: they resume with Adam
    (and report the start they had, both factors in ±1/64, an unweighted loss, and the last
    iterate: their checkpoints hold no snapshot sum)."""
    newer = ("optimizer", "embedding_init", "output_init", "class_balance", "average_snapshots")
    older = {k: v for k, v in HParams(learning_rate=0.003).as_dict().items() if k not in newer}

    assert HParams.from_dict(older) == HParams(
        optimizer="adam",
        learning_rate=0.003,
        embedding_init=1 / 64,
        output_init=1 / 64,
        class_balance=0.0,
        average_snapshots=0,
    )
    assert HParams.from_dict(DEFAULT_HPARAMS.as_dict()) == DEFAULT_HPARAMS


@pytest.mark.parametrize(
    ("losses", "epochs"),
    [
        ([1.0, 0.9, 0.8, 0.7, 0.6, 0.5], 6),  # a lower loss each epoch is progress: no early stop
        ([1.0, 1.1, 1.2, 1.3, 1.4, 1.5], 3),  # neither score nor loss improves: patience 2 stops it
        ([1.0, 1.1, 0.95, 1.2, 1.3, 1.4], 5),  # the new lowest loss of epoch 3 restarts the count
    ],
    ids=["falling-loss", "rising-loss", "one-new-low"],
)
def test_an_epoch_with_the_lowest_validation_loss_so_far_is_progress(
    tmp_path: Path,
    small_data: LabelledData,
    quick_hparams: HParams,
    monkeypatch: pytest.MonkeyPatch,
    losses: list[float],
    epochs: int,
) -> None:
    """The validation accuracy peaks in epoch 1; the loss alone decides when training stops,
    and the weights kept are epoch 1's whatever happens after."""
    real_end_epoch = session._end_epoch
    kept: dict[str, torch.Tensor] = {}

    def end_epoch(model, state, prepared, hparams) -> None:  # type: ignore[no-untyped-def]
        epoch = state.epoch
        score = 0.9 if epoch == 1 else 0.5
        monkeypatch.setattr(session, "validate", lambda *args: (score, losses[epoch - 1]))
        if epoch == 1:
            kept.update({k: v.detach().clone() for k, v in model.state_dict().items()})
        real_end_epoch(model, state, prepared, hparams)

    monkeypatch.setattr(session, "_end_epoch", end_epoch)
    hparams = dataclasses.replace(quick_hparams, max_epochs=6, min_updates=1, lr_plateau_factor=1.0)
    result = train(small_data, workdir=tmp_path / "work", out_dir=tmp_path / "out", hparams=hparams)

    assert result.epochs == epochs
    # the embedding is saved as float16; the output layer has the temperature folded in
    assert torch.equal(_weights(tmp_path / "out")["embedding"], kept["embedding.weight"].half())


def test_plateau_cuts_of_the_learning_rate_survive_a_stop_and_resume(
    tmp_path: Path, small_data: LabelledData, quick_hparams: HParams, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Validation scores that worsen on every even epoch cut the rate there and never stop
    training early; a run stopped mid-epoch 3, after the first cut, resumes at the cut rate."""
    real_end_epoch = session._end_epoch

    def end_epoch(model, state, prepared, hparams) -> None:  # type: ignore[no-untyped-def]
        score = state.epoch / 100 if state.epoch % 2 else 0.0
        monkeypatch.setattr(session, "validate", lambda *args: (score, 1.0))
        real_end_epoch(model, state, prepared, hparams)

    monkeypatch.setattr(session, "_end_epoch", end_epoch)
    constant = dataclasses.replace(quick_hparams, lr_plateau_factor=1.0)
    train(small_data, workdir=tmp_path / "c-work", out_dir=tmp_path / "c", hparams=constant)
    train(small_data, workdir=tmp_path / "ref-work", out_dir=tmp_path / "ref", hparams=quick_hparams)
    with pytest.raises(TrainingStopped):
        train(
            small_data,
            workdir=tmp_path / "work",
            out_dir=tmp_path / "out",
            hparams=quick_hparams,
            should_stop=_stop_after(30),  # 12 updates an epoch: mid-epoch 3
        )
    train(small_data, workdir=tmp_path / "work", out_dir=tmp_path / "out", hparams=quick_hparams)

    cut, uncut, resumed = (_weights(tmp_path / name) for name in ("ref", "c", "out"))
    assert not torch.equal(cut["output.weight"], uncut["output.weight"])  # the cuts changed training
    for key in cut:
        assert torch.equal(cut[key], resumed[key]), key


def test_training_twice_with_the_same_seed_gives_identical_models(
    tmp_path: Path, small_data: LabelledData, quick_hparams: HParams
) -> None:
    train(small_data, workdir=tmp_path / "w1", out_dir=tmp_path / "m1", hparams=quick_hparams)
    train(small_data, workdir=tmp_path / "w2", out_dir=tmp_path / "m2", hparams=quick_hparams)
    first, second = _weights(tmp_path / "m1"), _weights(tmp_path / "m2")
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_progress_reports_every_phase_in_order_with_global_steps(
    tmp_path: Path, small_data: LabelledData, quick_hparams: HParams
) -> None:
    seen: list[Progress] = []
    result = train(
        small_data,
        workdir=tmp_path / "w",
        out_dir=tmp_path / "m",
        hparams=quick_hparams,
        on_progress=seen.append,
    )
    phases = [p.phase for p in seen]
    assert phases[0] == "preparing" and phases[-1] == "done"
    assert list(dict.fromkeys(phases)) == ["preparing", "training", "evaluating", "saving", "done"]
    assert seen[-1].step == result.applied_updates <= seen[-1].total_steps
    # no estimate outside training (it said 0.0 through minutes of cross-fitting)
    assert all(p.eta_seconds is None for p in seen if p.phase in ("preparing", "evaluating", "saving"))
    assert seen[-1].eta_seconds == 0.0
    assert seen[-1].checkpoints >= 1 and seen[-1].learners == 1
    assert json.loads(json.dumps(seen[-1].as_dict())) == seen[-1].as_dict()
    counters = seen[-1].ps
    assert counters is not None and counters["learners"] == 1
    assert counters["applied"] == counters["pushed"] == result.applied_updates
    # validation accuracy: none before the first epoch ends, then the last epoch's, in [0, 1]
    assert seen[0].validation_accuracy is None
    measured = [p.validation_accuracy for p in seen if p.validation_accuracy is not None]
    assert measured and all(0.0 <= a <= 1.0 for a in measured)
    assert seen[-1].validation_accuracy is not None


def test_data_without_a_validation_split_reports_no_validation_accuracy(
    tmp_path: Path, small_data: LabelledData, quick_hparams: HParams
) -> None:
    seen: list[Progress] = []
    no_split = dataclasses.replace(_without_split(quick_hparams), cross_fit_folds=0)
    train(
        small_data, workdir=tmp_path / "w", out_dir=tmp_path / "m", hparams=no_split, on_progress=seen.append
    )
    assert seen[-1].phase == "done"
    assert all(p.validation_accuracy is None for p in seen)


def test_metrics_are_reported_on_the_validation_split(
    tmp_path: Path, small_data: LabelledData, quick_hparams: HParams
) -> None:
    result = train(small_data, workdir=tmp_path / "w", out_dir=tmp_path / "m", hparams=quick_hparams)
    assert result.metrics["evaluated_on"] == "validation"
    assert result.metrics["n"] == 12
    assert set(result.metrics["per_class"]) == {"booking", "music", "weather"}  # type: ignore[arg-type]


def test_a_negative_learner_count_is_refused(tmp_path: Path, small_data: LabelledData) -> None:
    with pytest.raises(TrainerError, match="learners"):
        train(small_data, workdir=tmp_path / "w", out_dir=tmp_path / "m", learners=-1)


def test_single_class_data_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidTrainingData):
        train(LabelledData(["a b", "c d"], ["x", "x"]), workdir=tmp_path / "w", out_dir=tmp_path / "m")


def test_a_checkpoint_of_other_data_is_not_resumed(
    tmp_path: Path, small_data: LabelledData, quick_hparams: HParams
) -> None:
    with pytest.raises(TrainingStopped):
        train(
            small_data,
            workdir=tmp_path / "w",
            out_dir=tmp_path / "m",
            hparams=quick_hparams,
            should_stop=lambda: True,
        )
    other = LabelledData(small_data.texts[:-1], small_data.labels[:-1])
    with pytest.raises(TrainerError, match="different training data"):
        train(other, workdir=tmp_path / "w", out_dir=tmp_path / "m", hparams=quick_hparams)


def _without_split(hparams: HParams) -> HParams:
    return dataclasses.replace(hparams, min_validation_rows=10_000, min_updates=60)


def test_data_too_small_to_split_is_scored_by_cross_fitting_and_calibrated(
    tmp_path: Path, small_data: LabelledData, quick_hparams: HParams
) -> None:
    result = train(
        small_data, workdir=tmp_path / "w", out_dir=tmp_path / "m", hparams=_without_split(quick_hparams)
    )
    metrics = result.metrics
    assert metrics["evaluated_on"] == "cross-validation" and metrics["n"] == len(small_data)
    assert 0.05 <= metrics["temperature"] <= 20.0  # type: ignore[operator]
    assert metrics["ece"] <= metrics["ece_uncalibrated"]  # type: ignore[operator]
    saved = json.loads((tmp_path / "m" / "model.json").read_text())
    assert saved["temperature"] == metrics["temperature"]


@pytest.mark.parametrize("rare", ["a", "z"])
def test_a_row_whose_other_folds_hold_one_class_is_predicted_as_that_class(
    tmp_path: Path, quick_hparams: HParams, rare: str
) -> None:
    """Its fold model cannot be trained: the row was scored uniform, and the argmax took the
    first class by name, so the rare class 'a' was reported found and 'z' missed."""
    data = LabelledData(
        ["the cat sat", "dogs bark", "dogs run", "dogs sleep", "dogs play"], [rare] + ["b"] * 4
    )

    metrics = train(data, workdir=tmp_path / "w", out_dir=tmp_path / "m", hparams=quick_hparams).metrics

    assert metrics["evaluated_on"] == "cross-validation"
    assert metrics["accuracy"] == 0.8 and metrics["per_class"][rare]["recall"] == 0.0  # type: ignore[index]


def test_a_multi_label_row_no_fold_model_can_score_is_not_given_every_label(
    tmp_path: Path, quick_hparams: HParams
) -> None:
    """sigmoid(0) = 0.5 put every class on it. Here the fold holding 'alpha beta' learns only x
    from the others, and predicts x alone (it gave x and y, y right by chance)."""
    data = LabelledData(["alpha beta", "alpha beta", "gamma", "delta"], ["x", "y", "x", "x"])

    metrics = train(
        data, workdir=tmp_path / "w", out_dir=tmp_path / "m", hparams=quick_hparams, multi_label=True
    ).metrics

    assert metrics["evaluated_on"] == "cross-validation"
    assert metrics["per_class"]["y"]["recall"] == 0.0  # type: ignore[index]


def test_one_multi_label_text_is_scored_on_itself(tmp_path: Path, quick_hparams: HParams) -> None:
    """Its one fold model would have nothing to learn from: it was scored uniform (micro-F1 1.0)."""
    data = LabelledData(["alpha beta", "alpha beta"], ["x", "y"])

    metrics = train(
        data, workdir=tmp_path / "w", out_dir=tmp_path / "m", hparams=quick_hparams, multi_label=True
    ).metrics

    assert metrics["evaluated_on"] == "training"


def test_a_stop_while_cross_fitting_resumes_to_the_uninterrupted_model(
    tmp_path: Path, small_data: LabelledData, quick_hparams: HParams
) -> None:
    hparams = _without_split(quick_hparams)
    reference = train(small_data, workdir=tmp_path / "ref-work", out_dir=tmp_path / "ref", hparams=hparams)
    with pytest.raises(TrainingStopped) as stopped:
        train(
            small_data,
            workdir=tmp_path / "work",
            out_dir=tmp_path / "out",
            hparams=hparams,
            # the final model asks after each update; the next ask is the wait for the folds
            should_stop=_stop_after(reference.applied_updates + 1),
        )
    assert stopped.value.applied_updates == reference.applied_updates
    resumed = train(small_data, workdir=tmp_path / "work", out_dir=tmp_path / "out", hparams=hparams)
    assert resumed.metrics == reference.metrics
    expected, actual = _weights(tmp_path / "ref"), _weights(tmp_path / "out")
    assert all(torch.equal(expected[k], actual[k]) for k in expected)


@pytest.mark.parametrize("rows_per_class", [[1, 2, 5], [1, 1]], ids=["one-two-five", "one-one"])
def test_classes_with_one_or_two_examples_train_to_finite_weights(
    tmp_path: Path, quick_hparams: HParams, rows_per_class: list[int]
) -> None:
    texts, labels = [], []
    for label, count in zip(("alpha", "beta", "gamma"), rows_per_class, strict=False):
        texts += [f"{label} word number {i}" for i in range(count)]
        labels += [label] * count
    result = train(
        LabelledData(texts, labels), workdir=tmp_path / "w", out_dir=tmp_path / "m", hparams=quick_hparams
    )
    assert result.metrics["evaluated_on"] == "cross-validation"
    assert all(torch.isfinite(t.float()).all() for t in _weights(tmp_path / "m").values())
