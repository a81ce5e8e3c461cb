"""Fixtures for the trainer tests: tiny synthetic data and hyper-parameters that train in a blink."""

from __future__ import annotations

import pytest
from synthetic import synthetic_data

from trainer.data import LabelledData
from trainer.hparams import HParams


@pytest.fixture
def small_data() -> LabelledData:
    """60 examples of 3 classes."""
    return synthetic_data(20)


@pytest.fixture
def quick_hparams() -> HParams:
    """A few hundred updates with a validation split, so early stopping is exercised."""
    return HParams(
        batch_size=4,
        min_updates=120,
        max_epochs=4,
        patience=2,
        validation_fraction=0.2,
        min_validation_rows=5,
        embedding_dim=8,
        checkpoint_every_updates=25,
        checkpoint_every_seconds=3600.0,
    )
