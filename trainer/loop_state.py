"""The training loop's mutable state, and the checkpoint that holds it with the server's.

A checkpoint is one dict (trainer.checkpoint's keys): the weights and optimizer state of the
parameter server at one version, each learner's data cursor, the RNG, the hyper-parameters,
the early-stopping bookkeeping, the data's fingerprint and the job's counts. Resume restores
exactly this, so that a resumed loop is the loop that was stopped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from trainer import checkpoint as ckpt
from trainer.averaging import IterateSum
from trainer.hparams import HParams
from trainer.preparation import Prepared
from trainer.ps.server import ParameterServer
from trainer.step import DataCursor


@dataclass
class LoopState:
    """The loop's mutable state; exactly what a checkpoint holds besides weights and optimizer."""

    epoch: int
    seed: int
    positions: list[int]  # each learner's committed position in its shard of ``epoch``
    best_accuracy: float = -1.0  # the best validation score: accuracy, or micro-F1 (multi-label)
    best_loss: float = math.inf  # the validation loss of the best-scoring epoch
    lowest_loss: float = math.inf  # the lowest validation loss of any epoch
    best_weights: dict[str, torch.Tensor] | None = None
    iterates: IterateSum = field(default_factory=IterateSum)  # this epoch's snapshots so far
    bad_epochs: int = 0  # epochs since the last one that made progress (trainer.session)
    lr_cuts: int = 0  # epochs without progress so far (OptimizerConfig.rate)
    finished: bool = False
    loss_sum: float = 0.0
    loss_count: int = 0
    last_epoch_loss: float | None = None
    validation_accuracy: float | None = None  # the score of the last epoch's end; None without a split
    checkpoints: int = 0
    resumed: int = 0
    train_seconds: float = 0.0
    last_checkpoint: str | None = field(default=None)
    # pushed / applied of earlier sessions (this session's come from the counters)
    earlier: dict[str, int] = field(default_factory=lambda: {"pushed": 0, "applied": 0})


# model_parameters() order; the direct path's weight only in an encoder model's
_NAMES = ("embedding.weight", "output.weight", "output.bias", "direct.weight")


def checkpoint_state(
    ps: ParameterServer, state: LoopState, hparams: HParams, prepared: Prepared
) -> dict[str, Any]:
    """The checkpoint of the server and the loop at the server's current version (every
    learner parked)."""
    snapshot = ps.snapshot()
    stats = ps.stats()
    return {
        ckpt.WEIGHTS: dict(zip(_NAMES[: len(snapshot["params"])], snapshot["params"], strict=True)),
        ckpt.OPTIMIZER: {"kind": snapshot["kind"], "state": snapshot["state"]},
        ckpt.VERSION: snapshot["version"],
        ckpt.CURSORS: [
            DataCursor(epoch=state.epoch, seed=state.seed, position=p).as_dict() for p in state.positions
        ],
        ckpt.RNG: {
            "torch": torch.get_rng_state(),
            "learner_seeds": [state.seed + r for r in range(len(state.positions))],
        },
        ckpt.HPARAMS: hparams.as_dict(),
        ckpt.EARLY_STOP: {
            "best_accuracy": state.best_accuracy,
            "best_loss": state.best_loss,
            "lowest_loss": state.lowest_loss,
            "best_weights": state.best_weights,
            "iterates": state.iterates.as_dict(),
            "bad_epochs": state.bad_epochs,
            "lr_cuts": state.lr_cuts,
            "finished": state.finished,
        },
        ckpt.DATA: {"fingerprint": prepared.fingerprint},
        ckpt.JOB: {
            "loss_sum": state.loss_sum,
            "loss_count": state.loss_count,
            "last_epoch_loss": state.last_epoch_loss,
            "validation_accuracy": state.validation_accuracy,
            "checkpoints": state.checkpoints,
            "resumed": state.resumed,
            "train_seconds": state.train_seconds,
            "learners": len(state.positions),
            "pushed": state.earlier["pushed"] + stats.pushed,
            "applied": state.earlier["applied"] + stats.applied,
        },
    }


def restore_state(saved: dict[str, Any], ps: ParameterServer) -> LoopState:
    """Load checkpoint ``saved`` into the server (and torch's RNG); the loop's state it holds,
    counting one resume more."""
    ps.restore(
        {
            "kind": saved[ckpt.OPTIMIZER]["kind"],
            "params": [saved[ckpt.WEIGHTS][name] for name in _NAMES if name in saved[ckpt.WEIGHTS]],
            "state": saved[ckpt.OPTIMIZER]["state"],
            "version": saved[ckpt.VERSION],
        }
    )
    torch.set_rng_state(saved[ckpt.RNG]["torch"])
    early, job, cursors = saved[ckpt.EARLY_STOP], saved[ckpt.JOB], saved[ckpt.CURSORS]
    return LoopState(
        epoch=int(cursors[0]["epoch"]),
        seed=int(cursors[0]["seed"]),
        positions=[int(c["position"]) for c in cursors],
        best_accuracy=float(early["best_accuracy"]),
        best_loss=float(early["best_loss"]),
        lowest_loss=float(early.get("lowest_loss", early["best_loss"])),  # absent in older checkpoints
        best_weights=early["best_weights"],
        iterates=IterateSum.from_dict(early.get("iterates"), ps.params[0].device),  # absent in older ones
        bad_epochs=int(early["bad_epochs"]),
        lr_cuts=int(early.get("lr_cuts", 0)),  # absent in older checkpoints
        finished=bool(early["finished"]),
        loss_sum=float(job["loss_sum"]),
        loss_count=int(job["loss_count"]),
        last_epoch_loss=job["last_epoch_loss"],
        validation_accuracy=job.get("validation_accuracy"),  # absent in older checkpoints
        checkpoints=int(job["checkpoints"]),
        resumed=int(job["resumed"]) + 1,
        train_seconds=float(job["train_seconds"]),
        earlier={k: int(job.get(k, 0)) for k in ("pushed", "applied")},
    )
