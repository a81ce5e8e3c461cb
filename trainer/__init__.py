"""taas trainer: text features, model, training loop, checkpoints, evaluation and inference.

A library: it imports torch, numpy and the standard library only.

The names below load with the module that defines them, on first use: ``import trainer.errors``
or ``trainer.encoder.registry`` (what `taas up`'s checks read) does not import torch and the
training engine, some 1.3 s of CPU in every process that never trains or serves.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainer.data import LabelledData, read_labelled_csv
    from trainer.engine import TrainResult, train
    from trainer.errors import (
        CheckpointCorrupt,
        InvalidTrainingData,
        NonFiniteLoss,
        TrainerError,
        TrainingStopped,
        WeightsOutOfBounds,
    )
    from trainer.hparams import DEFAULT_HPARAMS, HParams
    from trainer.inference import LoadedModel
    from trainer.progress import Progress

_DEFINED_IN = {
    "DEFAULT_HPARAMS": "trainer.hparams",
    "CheckpointCorrupt": "trainer.errors",
    "HParams": "trainer.hparams",
    "InvalidTrainingData": "trainer.errors",
    "LabelledData": "trainer.data",
    "LoadedModel": "trainer.inference",
    "NonFiniteLoss": "trainer.errors",
    "Progress": "trainer.progress",
    "TrainResult": "trainer.engine",
    "TrainerError": "trainer.errors",
    "TrainingStopped": "trainer.errors",
    "WeightsOutOfBounds": "trainer.errors",
    "read_labelled_csv": "trainer.data",
    "train": "trainer.engine",
}

__all__ = [
    "DEFAULT_HPARAMS",
    "CheckpointCorrupt",
    "HParams",
    "InvalidTrainingData",
    "LabelledData",
    "LoadedModel",
    "NonFiniteLoss",
    "Progress",
    "TrainResult",
    "TrainerError",
    "TrainingStopped",
    "WeightsOutOfBounds",
    "read_labelled_csv",
    "train",
]


def __getattr__(name: str) -> object:
    """``trainer.<name>`` (and ``from trainer import <name>``): loaded from its module once."""
    module = _DEFINED_IN.get(name)
    if module is None:
        raise AttributeError(f"module 'trainer' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
