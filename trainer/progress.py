"""Training progress: the Progress snapshot and the reporter that paces it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Progress:
    """A snapshot of a training job, reported about once a second and at each phase change."""

    phase: str  # "encoding" | "preparing" | "training" | "evaluating" | "saving" | "done"
    epoch: int  # 1-based current epoch
    # updates applied so far (global, across resumes); while "encoding", texts encoded
    step: int
    # planned updates (upper bound when early stopping may end sooner); while "encoding", texts
    total_steps: int
    loss: float | None  # running mean training loss of the current epoch (else of the last one)
    samples_per_second: float
    eta_seconds: float | None
    checkpoints: int  # checkpoints written so far in this job (across resumes)
    resumed: int  # how many times this job was resumed from a checkpoint
    learners: int  # K
    # accuracy on the validation split at the end of the last epoch (None before the first
    # epoch ends, and for data too small for a split)
    validation_accuracy: float | None = None
    # parameter-server counters (trainer.ps.counters.PSStats.as_dict(), cumulative across
    # resumes for pushed/applied): pushed, applied, staleness histogram, seconds in
    # push/pull/apply/compute and waiting at a staleness bound, bytes moved. None before the
    # server exists.
    ps: dict[str, object] | None = None

    def as_dict(self) -> dict[str, object]:
        """JSON-safe dict of every field."""
        return asdict(self)


class ProgressReporter:
    """Turns the loop's counters into Progress calls with rates and an ETA.

    ``samples`` is added to by the loop; rates and the ETA cover this session only (since
    the first report), so a resumed job reports its own speed. Samples/s counts only the time
    spent training (between reports of phase "training"); the ETA, all of it (each epoch's
    validation recurs).
    """

    def __init__(
        self,
        on_progress: Callable[[Progress], None],
        every: float,
        total_steps: int,
        max_epochs: int,
        learners: int,
    ) -> None:
        self.on_progress = on_progress
        self.every = every
        self.total_steps = total_steps
        self.max_epochs = max_epochs
        self.learners = learners
        self.started = time.monotonic()
        self.start_version: int | None = None
        self.samples = 0
        self.last = 0.0
        self.phase: str | None = None  # of the last report: the time since it was spent so
        self.training_seconds = 0.0  # time between reports whose phase was "training"

    def due(self) -> bool:
        """Whether a progress report is due (``every`` seconds since the last one)."""
        return time.monotonic() - self.last >= self.every

    def report(
        self,
        phase: str,
        *,
        epoch: int,
        step: int,
        loss: float | None,
        checkpoints: int,
        resumed: int,
        ps: dict[str, object] | None = None,
        validation_accuracy: float | None = None,
    ) -> None:
        """Call on_progress with a Progress for these values; rates count from the first report."""
        now = time.monotonic()
        if self.phase == "training":
            self.training_seconds += now - self.last
        self.phase, self.last = phase, now
        if self.start_version is None:
            self.start_version = step
            self.started = now
        elapsed = now - self.started
        rate = (step - self.start_version) / elapsed if elapsed > 0 else 0.0
        remaining = max(self.total_steps - step, 0)
        if phase in ("training", "encoding"):  # encoding: of its own steps (texts), not the job's
            eta = remaining / rate if rate > 0 else (0.0 if remaining == 0 else None)
        else:  # unknown while it prepares, evaluates (cross-fitting: half a job) or saves
            eta = 0.0 if phase == "done" else None
        self.on_progress(
            Progress(
                phase=phase,
                epoch=min(epoch, self.max_epochs),
                step=step,
                total_steps=self.total_steps,
                loss=loss,
                # while training: the time validation and evaluation took pulled a job's
                # figure from 3,000 to 1,091 by its end
                samples_per_second=self.samples / self.training_seconds if self.training_seconds > 0 else 0.0,
                eta_seconds=eta,
                checkpoints=checkpoints,
                resumed=resumed,
                learners=self.learners,
                validation_accuracy=validation_accuracy,
                ps=ps,
            )
        )
