"""The operator's TAAS_* overrides of the installation's hyper-parameter set."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from service.core.settings import Settings
from trainer.hparams import DEFAULT_HPARAMS
from workers.training_run import operator_hparams


def test_without_overrides_a_worker_trains_with_the_default_set() -> None:
    assert operator_hparams(Settings()) == DEFAULT_HPARAMS


def test_a_staleness_bound_set_in_the_environment_reaches_the_trainer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TAAS_STALENESS_BOUND", "3")
    monkeypatch.setenv("TAAS_CHECKPOINT_EVERY_UPDATES", "100")
    hparams = operator_hparams(Settings())
    assert (hparams.staleness_bound, hparams.checkpoint_every_updates) == (3, 100)
    assert hparams.learning_rate == DEFAULT_HPARAMS.learning_rate  # nothing else moves


def test_a_negative_staleness_bound_is_refused_at_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAAS_STALENESS_BOUND", "-1")
    with pytest.raises(ValidationError, match="staleness_bound"):
        Settings()
