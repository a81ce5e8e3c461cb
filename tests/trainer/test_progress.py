"""The progress reporter's rates: samples/s while training, whatever else the job spends time on."""

from __future__ import annotations

import pytest

from trainer import progress as progress_module
from trainer.progress import Progress, ProgressReporter


def test_samples_per_second_leaves_out_the_time_spent_evaluating(monkeypatch: pytest.MonkeyPatch) -> None:
    """A job trained at about 3,000 samples/s reported 1,091 by its end: the rate was the
    samples over all the time since its start, validation and evaluation included."""
    clock = [100.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: clock[0])
    reports: list[Progress] = []
    reporter = ProgressReporter(reports.append, every=1.0, total_steps=200, max_epochs=2, learners=1)

    def at(seconds: float, phase: str, step: int, samples: int) -> float:
        clock[0] = 100.0 + seconds
        reporter.samples = samples
        reporter.report(phase, epoch=1, step=step, loss=1.0, checkpoints=0, resumed=0)
        return reports[-1].samples_per_second

    at(0, "training", 0, 0)
    assert at(1, "training", 50, 1000) == 1000.0
    assert at(2, "evaluating", 100, 2000) == 1000.0  # the second before it was training
    assert at(12, "training", 100, 2000) == 1000.0  # ten seconds evaluating: not counted
    assert at(13, "training", 150, 3000) == 1000.0
    assert at(14, "evaluating", 200, 4000) == 1000.0
    assert at(20, "done", 200, 4000) == 1000.0  # was 4,000 samples over 20 s: 200
