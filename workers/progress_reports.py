"""The trainer's progress, written to the job row while the claim trains.

A report is written at each phase change and otherwise at most every
``progress_every_seconds``, with the job's progress history (service.training.history). When a
training session begins, its first report also records what it resumed, and lets the
checkpoint pointer move back if the session began below it (workers.checkpoint_pointer). A
write the database missed is made again with a later report.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time

from service.training import history
from service.training.leases import record_progress, record_resumed
from trainer.progress import Progress
from workers.checkpoint_pointer import CheckpointPointer
from workers.job_writes import JobWrites, utc_now
from workers.lease import LeaseKeeper

log = logging.getLogger(__name__)


class ProgressReports:
    """The ``on_progress`` of one claim's training."""

    def __init__(
        self,
        keeper: LeaseKeeper,
        writes: JobWrites,
        pointer: CheckpointPointer,
        every_seconds: float,
        recorded: list[dict[str, object]],
        resumed_from: int | None,
    ) -> None:
        self.keeper = keeper
        self.writes = writes
        self.pointer = pointer
        self.every_seconds = every_seconds
        self.job_id = writes.job_id
        # the update of the recorded checkpoint the claim's folder was seeded with (None: the
        # training starts from scratch); the claim clears it when it starts over
        self.resumed_from = resumed_from
        self._history = recorded  # the job's progress history so far
        self._last_progress = 0.0
        self._last_phase = ""
        self._resume_unrecorded: int | None = None  # a resume whose record the database missed

    def on_progress(self, progress: Progress) -> None:
        """Write ``progress`` if its phase changed or the last report is old enough."""
        clock = time.monotonic()
        phase_changed = progress.phase != self._last_phase
        if phase_changed and progress.phase == "training":
            self._training_began(progress.step)
        if not phase_changed and clock - self._last_progress < self.every_seconds:
            return
        self._last_phase, self._last_progress = progress.phase, clock
        # in use, whenever the last checkpoint was written: a process sharing this root sweeps
        # the checkpoint folders untouched for the copy age (ArtifactStore.sweep_work_copies)
        with contextlib.suppress(OSError):  # a mark only: the checkpoint's own write reports trouble
            os.utime(self.pointer.workdir)
        # at the start of training, or with a later progress report when the database missed it
        self.pointer.rewind_if_due()
        if self._resume_unrecorded is not None:
            self._record_resumed(self._resume_unrecorded)
        self._write_progress(progress)

    def _training_began(self, step: int) -> None:
        """The trainer began a training session at update ``step``: resuming the recorded
        checkpoint, or the one kept before it when that was unusable, or from the start (the
        first claim, or the recorded files were gone or unusable, or it started over at a lower
        learning rate after the training diverged, its checkpoints discarded).

        Below the pointer's step, the pointer is moved back to what the session continues from
        (that checkpoint, or none): it named work this session does not continue, and it kept
        naming it until a new checkpoint passed its step, so a stop before then resumed the
        discarded run (a diverged one: at the rate it diverged at) or started over again."""
        if self.resumed_from is not None and step == 0:  # nothing was resumed, after all
            self.resumed_from = None
        if self.resumed_from is not None:
            if step < self.resumed_from:
                log.warning(
                    "job %s: the checkpoint at update %d is unusable; resuming from update %d",
                    self.job_id,
                    self.resumed_from,
                    step,
                )
            self._resume_unrecorded = step
        self.pointer.session_began(step)

    def _write_progress(self, progress: Progress) -> None:
        lease = self.keeper.lease
        report = progress.as_dict()
        self._history = history.with_point(self._history, report, time.time())
        report[history.HISTORY_KEY] = self._history
        written = self.writes.unless_unreachable(
            "progress",
            lambda session: record_progress(session, lease, report, now=utc_now()),
        )
        if written is False:
            self.keeper.mark_lost("progress write refused")

    def _record_resumed(self, step: int) -> None:
        lease = self.keeper.lease
        written = self.writes.unless_unreachable(
            "the resume",
            lambda session: record_resumed(session, lease, step=step, now=utc_now()),
        )
        if written is None:
            return  # tried again at the next progress report
        self._resume_unrecorded = None
        if not written:
            self.keeper.mark_lost("resume record refused")
        log.info("job %s: resumed from the checkpoint at update %d", self.job_id, step)
