"""The supervisor of one training session: rounds, epoch ends, checkpoint cadence, stop, progress.

It runs in the caller's process. The learners work in rounds (trainer.ps.pool): a round ends
when every learner has parked, at the end of its shard or after the supervisor asked them to
pause. Between rounds the state is consistent at one version, and that is where validation,
early stopping and checkpoints happen.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from trainer import checkpoint as ckpt
from trainer.averaging import SnapshotPlan
from trainer.errors import NonFiniteLoss, TrainingStopped
from trainer.held_out import validate
from trainer.hparams import HParams
from trainer.loop_state import LoopState, checkpoint_state
from trainer.model import TextClassifier
from trainer.preparation import Prepared
from trainer.progress import Progress, ProgressReporter
from trainer.ps import counters as C
from trainer.ps.cuda import StreamPool
from trainer.ps.graph import GraphPool
from trainer.ps.pool import InProcessPool, ProcessPool, RoundResult
from trainer.ps.server import ParameterServer
from trainer.step import epoch_updates, shard_lengths


class Session:
    """One call's supervision: rounds, epoch ends, checkpoint cadence, stop, progress."""

    def __init__(
        self,
        ps: ParameterServer,
        pool: InProcessPool | ProcessPool | StreamPool | GraphPool,
        state: LoopState,
        hparams: HParams,
        prepared: Prepared,
        workdir: Path,
        on_progress: Callable[[Progress], None],
        should_stop: Callable[[], bool],
        session_start: float,
    ) -> None:
        self.ps, self.pool, self.state, self.hparams, self.prepared = ps, pool, state, hparams, prepared
        self.workdir, self.should_stop = workdir, should_stop
        self.accounted = session_start
        self.reporter = ProgressReporter(
            on_progress,
            hparams.progress_every_seconds,
            prepared.max_epochs
            * epoch_updates(len(prepared.train_targets), len(state.positions), hparams.batch_size),
            prepared.max_epochs,
            len(state.positions),
        )
        self.plan = SnapshotPlan(
            shard_lengths(len(prepared.train_targets), len(state.positions)),
            hparams.batch_size,
            hparams.average_snapshots,
        )
        self.stop_requested = False
        self.last_checkpoint_time = time.monotonic()
        self.last_checkpoint_version = ps.version()

    def run(self, model: TextClassifier) -> None:
        """Rounds until the plan or early stopping ends training. Raises TrainingStopped, NonFiniteLoss."""
        state = self.state
        self.report("training")
        while not state.finished:
            self.ps.server[C.LR_CUTS] = state.lr_cuts  # learners are parked between rounds
            ends = self.plan.next_ends(state.positions)
            result: RoundResult = self.pool.run_round(state.epoch, state.positions, ends, self._tick)
            state.positions = result.positions
            state.loss_sum += result.loss_sum
            state.loss_count += result.loss_count
            if result.nonfinite is not None:
                raise NonFiniteLoss(self.ps.version() + 1, result.nonfinite)
            if self.hparams.average_snapshots and result.positions == ends:
                state.iterates.add(self.ps.params)
            if all(result.done):
                with state.iterates.mean_in(self.ps.params, keep=lambda: state.finished):
                    _end_epoch(model, state, self.prepared, self.hparams)
            if self.stop_requested or self._checkpoint_due():
                self.save_checkpoint()
            if self.stop_requested:
                raise TrainingStopped(self.ps.version(), state.last_checkpoint)
            if self.reporter.due():
                self.report("training")

    def _checkpoint_due(self) -> bool:
        return (
            self.ps.version() - self.last_checkpoint_version >= self.hparams.checkpoint_every_updates
            or time.monotonic() - self.last_checkpoint_time >= self.hparams.checkpoint_every_seconds
        )

    def _tick(self) -> bool:
        """Between steps (K = 1) or every ~50 ms (K > 1): true asks the learners to park."""
        if self.should_stop():
            self.stop_requested = True
        if self.reporter.due():
            self.report("training")
        return self.stop_requested or self._checkpoint_due()

    def save_checkpoint(self) -> None:
        """Write a checkpoint of the current (quiescent) state."""
        now = time.monotonic()
        state = self.state
        state.train_seconds += now - self.accounted
        self.accounted = now
        state.checkpoints += 1
        state.last_checkpoint = str(
            ckpt.save(self.workdir, checkpoint_state(self.ps, state, self.hparams, self.prepared))
        )
        self.last_checkpoint_time, self.last_checkpoint_version = time.monotonic(), self.ps.version()

    def ps_stats(self) -> dict[str, object]:
        """The server's counters, pushed/applied cumulative across resumes."""
        stats = self.ps.stats().as_dict()
        for key, value in self.state.earlier.items():
            stats[key] = int(stats[key]) + value  # type: ignore[call-overload]
        stats["respawns"] = getattr(self.pool, "respawns", 0)
        return stats

    def report(self, phase: str) -> None:
        state = self.state
        losses = self.pool.losses
        running = losses[losses[:, 1] > 0]
        loss_sum = state.loss_sum + float(running[:, 0].sum())
        loss_count = state.loss_count + int(running[:, 1].sum())
        self.reporter.samples = int(self.ps.counters.array[1:, C.SAMPLES].sum())
        self.reporter.report(
            phase,
            epoch=state.epoch - 1 if state.finished else state.epoch,
            step=self.ps.version(),
            loss=loss_sum / loss_count if loss_count else state.last_epoch_loss,
            validation_accuracy=state.validation_accuracy,
            checkpoints=state.checkpoints,
            resumed=state.resumed,
            ps=self.ps_stats(),
        )


def _end_epoch(model: TextClassifier, state: LoopState, prepared: Prepared, hparams: HParams) -> None:
    """Early-stopping bookkeeping after the last update of an epoch, then move the cursors on.

    The weights kept are the best epoch's: the higher validation score (validate), or an
    equal score with a lower validation loss. An epoch makes progress when it is the best so
    far or its validation loss is the lowest so far; ``patience`` epochs in a row without
    progress stop training, and each cuts the learning rate. Loss counts as progress because
    a model far from a solution (many classes, few rows each: benchmarks/many_classes.py)
    can lower the loss for epochs before the top-1 score moves, and stopping on the score
    alone ended such runs with a third of their classes learned.
    """
    if prepared.validation_bags is not None and prepared.validation_targets is not None:
        score, loss = validate(
            model, prepared.validation_bags, prepared.validation_targets, prepared.multi_label
        )
        state.validation_accuracy = score
        best = (score, -loss) > (state.best_accuracy, -state.best_loss)
        if best:
            state.best_accuracy, state.best_loss = score, loss
            state.best_weights = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        if best or loss < state.lowest_loss:
            state.bad_epochs = 0
        else:
            state.bad_epochs += 1
            state.lr_cuts += 1
        state.lowest_loss = min(state.lowest_loss, loss)
        if state.bad_epochs >= hparams.patience:
            state.finished = True
    if state.epoch >= prepared.max_epochs:
        state.finished = True
    state.epoch += 1
    state.positions = [0] * len(state.positions)
    state.last_epoch_loss = state.loss_sum / max(state.loss_count, 1)
    state.loss_sum, state.loss_count = 0.0, 0
