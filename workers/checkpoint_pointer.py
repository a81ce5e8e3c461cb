"""The job's checkpoint pointer, which the claim that trains the job moves.

Every checkpoint the trainer writes in the claim's folder is stored for every node (the
artifact store's publish) and then recorded as the job's pointer, a write fenced by the
lease's epoch, so that the next claim resumes from it. A training session that begins below
the pointer (starting over, or from the checkpoint kept before an unusable one) moves the
pointer back first. Once the pointer names this claim's folder, the earlier claims' folders go.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from service.storage.store import ArtifactStore
from service.training.job_views import job_context
from service.training.leases import record_checkpoint, rewind_checkpoint
from trainer.checkpoint import list_checkpoints
from trainer.sentence_features import CACHE_FILE as VECTORS_CACHE
from workers.job_files import claim_epoch, drop_skipped
from workers.job_writes import UNREACHABLE, JobWrites, utc_now
from workers.lease import LeaseKeeper

log = logging.getLogger(__name__)


class CheckpointPointer:
    """Records each new checkpoint the trainer writes as the job's fenced checkpoint pointer.

    Polled from ``should_stop`` after every update: one ``stat`` of the folder, and a listing
    only when its mtime changed (the trainer renames a new file in) or a second has passed, so
    the pointer moves within one update of the file appearing.
    """

    def __init__(
        self,
        workdir: Path,
        keeper: LeaseKeeper,
        store: ArtifactStore,
        writes: JobWrites,
        seeded: int | None,
    ) -> None:
        self.workdir = workdir
        self.keeper = keeper
        self.store = store
        self.writes = writes
        self.job_id = writes.job_id
        self.recorded = -1 if seeded is None else seeded
        self._mtime = 0
        self._scanned = 0.0
        self._rewind_unrecorded: int | None = None  # a move of the pointer back the database missed
        self._earlier_claims_dropped = False
        self._published: Path | None = None  # the checkpoint last stored for every node, this session

    def poll(self) -> None:
        """Record the newest checkpoint in the folder if it is past the pointer."""
        try:
            mtime = os.stat(self.workdir).st_mtime_ns
        except FileNotFoundError:
            return
        clock = time.monotonic()
        if mtime == self._mtime and clock - self._scanned < 1.0:
            return
        self._mtime, self._scanned = mtime, clock
        found = list_checkpoints(self.workdir)
        if not found or found[0][0] <= self.recorded:
            return
        version, path = found[0]
        recorded = self.record(path, version)
        if recorded is None:  # not recorded: tried again at the next scan, within a second
            return
        self.recorded = version
        if not recorded:
            self.keeper.mark_lost("checkpoint pointer refused")

    def record(self, path: Path, step: int) -> bool | None:
        """Point the job at the checkpoint ``path``: False when refused (the lease is lost),
        None when the database cannot be reached (the watcher tries again at its next poll)."""
        self._publish(path)
        lease, relative = self.keeper.lease, self.store.relative(path)
        recorded = self.writes.unless_unreachable(
            "the checkpoint pointer",
            lambda session: record_checkpoint(session, lease, path=relative, step=step, now=utc_now()),
        )
        if recorded:  # past the step a rewind the database missed would have gone back to
            self._rewind_unrecorded = None
        if recorded and not self._earlier_claims_dropped:
            # The pointer names this claim's folder now, and no earlier claim can move it: their
            # folders only filled the disk (four yields of a 2,000-row job: 730 MB, and a disk
            # that the job would fit waited for space for ever). A later claim's is left alone:
            # this lease may have run out since.
            for folder in path.parent.parent.iterdir():
                if claim_epoch(folder.name) < lease.epoch:
                    self.store.delete_tree(folder)
            self._earlier_claims_dropped = True
        return recorded

    def _publish(self, path: Path) -> None:
        """Store the checkpoint ``path`` for every node (and remove the rotated-out one) before
        the pointer names it; once, however many tries the pointer takes."""
        if path != self._published:
            vectors = path.parent / VECTORS_CACHE
            if self._published is None and vectors.is_file():  # once a claim: a resume skips the encoder
                self.store.publish(vectors)
            self.store.publish(path)
            self.store.prune(path.parent)
            self._published = path

    def session_began(self, step: int) -> None:
        """A training session began at update ``step`` (workers.progress_reports): below the
        pointer's step, the pointer is to move back to what the session continues from (that
        checkpoint, or none), with the next progress report."""
        # a session after a start over may write a file under a name the last one stored (the
        # same step): stored again, or the remote kept the discarded run's file under that name
        self._published = None
        drop_skipped(self.workdir, step)
        if step < self.recorded:
            self._rewind_unrecorded = step

    def rewind_if_due(self) -> None:
        """Move the pointer back, if a session began below it and the move is not recorded
        yet (at the start of training, or later when the database missed it)."""
        if self._rewind_unrecorded is not None:
            self._rewind(self._rewind_unrecorded)

    def _rewind(self, step: int) -> None:
        """Point the job at this claim's checkpoint of update ``step``, or at none for update 0."""
        lease, workdir = self.keeper.lease, self.workdir
        path = next((path for version, path in list_checkpoints(workdir) if version == step), None)
        if path is not None:  # a hard link of an earlier claim's file, not stored under this name
            self._publish(path)
        relative = None if path is None else self.store.relative(path)
        written = self.writes.unless_unreachable(
            "the checkpoint pointer",
            lambda session: rewind_checkpoint(session, lease, path=relative, step=step, now=utc_now()),
        )
        if written is None:
            return  # tried again at the next progress report; the watcher waits for it
        self._rewind_unrecorded = None
        if not written:
            self.keeper.mark_lost("checkpoint pointer refused")
            return
        self.recorded = step if path is not None else -1
        log.info(
            "job %s: checkpoint pointer moved back to %s", self.job_id, relative or "none (from the start)"
        )

    def drop_unrecorded_claim(self) -> None:
        """After the lease was lost: remove this claim's checkpoint folder unless the job's
        pointer names it (then the next claim resumes from it, and drops it once it records its
        own). A worker that woke after its job had finished wrote its stop checkpoint, 95 MB,
        into a finished version."""
        try:
            with self.writes.sessions() as session:
                now = job_context(session, self.job_id)
        except UNREACHABLE:
            return  # the next claim removes it once it records a checkpoint of its own
        folder = self.store.relative(self.workdir)
        if now is not None and not (now.checkpoint_path or "").startswith(f"{folder}/"):
            self.store.delete_tree(self.workdir)
