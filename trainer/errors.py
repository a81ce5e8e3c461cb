"""Errors the trainer raises. Callers (workers, the CLI) map them to a job's failure reason.

TrainerError
├── InvalidTrainingData   the data cannot be trained on (row, rule)
├── CheckpointCorrupt     no usable checkpoint / model file (checksum, truncation, format)
├── TrainingStopped       should_stop() turned true; a checkpoint was written first
├── NonFiniteLoss         the loss became NaN/inf (never expected with the fixed HParams)
└── WeightsOutOfBounds    training ended with weights no model loader takes (diverged)
"""

from __future__ import annotations


class TrainerError(Exception):
    """Base class of every error the trainer raises on purpose."""


class InvalidTrainingData(TrainerError):
    """The training data breaks a rule.

    ``row`` is the 1-based record number in the CSV file counting the header as row 1
    (so the first example is row 2), or 0 when the rule is about the data as a whole.
    """

    def __init__(self, row: int, rule: str) -> None:
        super().__init__(f"row {row}: {rule}" if row else rule)
        self.row = row
        self.rule = rule

    def __reduce__(self) -> tuple[type, tuple[int, str]]:  # pickled by its fields (trainer.folds)
        return type(self), (self.row, self.rule)


class CheckpointCorrupt(TrainerError):
    """A checkpoint or model file exists but none is usable (bad checksum, torn write, bad format)."""


class TrainingStopped(TrainerError):
    """Training stopped because ``should_stop()`` returned true; a checkpoint holds the state."""

    def __init__(self, applied_updates: int, checkpoint: str | None) -> None:
        super().__init__(f"training stopped after {applied_updates} updates; checkpoint {checkpoint}")
        self.applied_updates = applied_updates
        self.checkpoint = checkpoint

    def __reduce__(self) -> tuple[type, tuple[int, str | None]]:
        return type(self), (self.applied_updates, self.checkpoint)


class NonFiniteLoss(TrainerError):
    """The training loss became NaN or infinite at update ``step``."""

    def __init__(self, step: int, loss: float) -> None:
        super().__init__(f"non-finite training loss {loss} at update {step}")
        self.step = step
        self.loss = loss

    def __reduce__(self) -> tuple[type, tuple[int, float]]:
        return type(self), (self.step, self.loss)


class WeightsOutOfBounds(TrainerError):
    """The trained weights hold NaN, infinite or huge values (``problem`` says which): training
    diverged without the loss overflowing, and such a model would answer nothing."""

    def __init__(self, problem: str) -> None:
        super().__init__(f"the trained weights are unusable: {problem}")
        self.problem = problem

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return type(self), (self.problem,)
