"""The learner's gradient in closed form (trainer.step) against autograd's, per step and per job.

    python benchmarks/step_bench.py [DATASET_DIR...] [--steps 2000] [--rounds 5]

A learner step computes the gradient of one mini-batch. ``TextClassifierTask`` writes it out
by hand; ``AutogradTask`` (below) is how it was computed before the twenty-second session:
the same forward, differentiated by autograd into a sparse gradient. tests/trainer/test_step.py
holds the two to the same numbers.

For each folder (default: the shared chatbot, webapps and snips sets), ``train.csv`` is
featurised as a job does (``trainer.preparation.prepare``), and then, in ``--rounds`` interleaved
rounds:

* ``step_us``: microseconds per ``compute`` of each task over the job's first ``--steps``
  mini-batches (batch 16, the epoch order of the K = 1 learner), the parameters as the job's
  model starts them;
* ``job_s``: the wall seconds of a whole K = 1 training (``trainer.train``, no cross-fitting,
  so one model) with each task, the engine's task swapped for the run.

A figure is the best round's (the least disturbed by other load). Prints one JSON line per
dataset: both figures for both tasks, and ``speedup``, autograd's over the closed form's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn.functional as F

import trainer.engine
from trainer import read_labelled_csv
from trainer.hparams import DEFAULT_HPARAMS
from trainer.model import bag_index, sentence_matrix
from trainer.preparation import initial_model, prepare, validation_split
from trainer.ps.applier import Gradient
from trainer.ps.learner import batches
from trainer.step import Batch, DataCursor, TextClassifierTask, model_parameters, multi_label_loss

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
DEFAULT_SETS = [SHARED / "nlu-eval-chatbot", SHARED / "nlu-eval-webapps", SHARED / "snips"]


class AutogradTask(TextClassifierTask):
    """The learner step as autograd computes it: the baseline, and tests' reference."""

    def attach(self, params: list[torch.Tensor]) -> None:
        """Leaf views of the server's tensors that autograd may differentiate (no copies)."""
        super().attach([p.data.requires_grad_(True) for p in params])

    def compute(self, pulled: None, batch: Batch) -> tuple[float, Gradient]:
        """Mean (binary) cross-entropy of ``batch`` and its gradient in push form, by autograd."""
        weight, bias, *direct = self.dense
        hidden = F.embedding_bag(
            batch.ids, self.table, batch.offsets, mode="sum", per_sample_weights=batch.weights, sparse=True
        )
        logits = F.linear(hidden, weight, bias)
        if direct:  # an encoder model's direct path (trainer.model)
            width = direct[0].shape[1]
            bags = bag_index(batch.offsets, batch.ids.numel())
            first = self.table.shape[0] - width
            sentence = sentence_matrix(batch.ids, batch.weights, bags, len(batch), first, width)
            logits = logits + self.direct_scale * sentence @ direct[0].t()
        if self.multi_label:
            loss = multi_label_loss(logits, batch.targets)
        else:
            loss = F.cross_entropy(logits, batch.targets, weight=self.class_weights)
        rows_grad, *dense_grads = torch.autograd.grad(loss, [self.table, weight, bias, *direct])
        if self.unique_rows:
            rows_grad = rows_grad.coalesce()
        return float(loss.detach()), Gradient(rows_grad._indices()[0], [rows_grad._values(), *dense_grads])


TASKS: dict[str, type[TextClassifierTask]] = {"closed_form": TextClassifierTask, "autograd": AutogradTask}


@contextmanager
def engine_task(task: type[TextClassifierTask]) -> Iterator[None]:
    """The engine trains with ``task`` inside the block."""
    saved = trainer.engine.TextClassifierTask
    trainer.engine.TextClassifierTask = task  # type: ignore[misc]
    try:
        yield
    finally:
        trainer.engine.TextClassifierTask = saved  # type: ignore[misc]


def step_us(folder: Path, steps: int, rounds: int) -> dict[str, float]:
    """Best round's microseconds per ``compute`` of each task on the job's first batches."""
    hparams = DEFAULT_HPARAMS
    data = read_labelled_csv(folder / "train.csv")
    prepared = prepare(data, hparams, "bench", validation_split(data, hparams), None)
    rows = len(prepared.train_targets)
    walked: list[Batch] = []
    epoch = 1
    while len(walked) < steps:  # epochs in a row, as the job walks them
        order = DataCursor(epoch=epoch, seed=hparams.seed).shard(rows, 0, 1)
        walked.extend(
            batch
            for batch, _ in batches(prepared.train_bags, prepared.train_targets, order, 0, hparams.batch_size)
        )
        epoch += 1
    walked = walked[:steps]
    params = [p.detach() for p, _ in model_parameters(initial_model(prepared, hparams))]
    best = dict.fromkeys(TASKS, float("inf"))
    for _ in range(rounds):
        for name, task_type in TASKS.items():
            task = task_type(unique_rows=False, class_weights=prepared.class_weights)
            task.attach(params)
            start = time.perf_counter()
            for batch in walked:
                task.compute(None, batch)
            best[name] = min(best[name], (time.perf_counter() - start) / steps * 1e6)
    return best


def job_s(folder: Path, rounds: int) -> dict[str, float]:
    """Best round's wall seconds of one K = 1 training with each task."""
    data = read_labelled_csv(folder / "train.csv")
    hparams = dataclasses.replace(DEFAULT_HPARAMS, cross_fit_folds=0)
    best = dict.fromkeys(TASKS, float("inf"))
    for _ in range(rounds):
        for name, task_type in TASKS.items():
            with tempfile.TemporaryDirectory() as tmp, engine_task(task_type):
                start = time.perf_counter()
                trainer.engine.train(
                    data, workdir=Path(tmp) / "w", out_dir=Path(tmp) / "m", hparams=hparams, learners=1
                )
                best[name] = min(best[name], time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("folders", nargs="*", type=Path, default=DEFAULT_SETS, metavar="DATASET_DIR")
    parser.add_argument("--steps", type=int, default=2000, help="mini-batches timed per task and round")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds; the best is reported")
    args = parser.parse_args()
    torch.set_num_threads(1)  # a learner's setting
    for folder in args.folders:
        steps, jobs = step_us(folder, args.steps, args.rounds), job_s(folder, args.rounds)
        print(
            json.dumps(
                {
                    "dataset": folder.name,
                    "step_us": {name: round(value, 1) for name, value in steps.items()},
                    "job_s": {name: round(value, 3) for name, value in jobs.items()},
                    "speedup": {
                        "step": round(steps["autograd"] / steps["closed_form"], 2),
                        "job": round(jobs["autograd"] / jobs["closed_form"], 2),
                    },
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
