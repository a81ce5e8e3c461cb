"""taas trainer: text features, model, training loop, checkpoints, evaluation and inference.

A library: it imports torch, numpy and the standard library only.
"""

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
