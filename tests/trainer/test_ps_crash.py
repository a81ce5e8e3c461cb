"""SIGKILL the whole training process at a random point, resume, compare with the uninterrupted run."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from synthetic import synthetic_data, write_csv
from test_ps_engine import planned_updates

from tests.processes import alive, descendants
from trainer import checkpoint as ckpt
from trainer.engine import train
from trainer.hparams import HParams
from trainer.inference import WEIGHTS_FILE

pytestmark = pytest.mark.timeout(180)

_CHILD = """
import sys
from pathlib import Path
from trainer.data import read_labelled_csv
from trainer.engine import train
from trainer.hparams import HParams
if __name__ == "__main__":
    train(read_labelled_csv(Path(sys.argv[1])), workdir=Path(sys.argv[2]), out_dir=Path(sys.argv[3]),
          hparams=HParams(**{hparams!r}), learners=int(sys.argv[4]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("learners", [1, 2, 3])  # 3: a striped server
def test_a_sigkilled_run_resumes_to_the_uninterrupted_result(tmp_path: Path, learners: int) -> None:
    data = synthetic_data(40)
    overrides = {
        "batch_size": 4,
        "min_updates": 0,
        "max_epochs": 60 if learners == 1 else 30,
        "min_validation_rows": 10**9,
        "embedding_dim": 8,
        "checkpoint_every_updates": 60,
        "checkpoint_every_seconds": 3600.0,
    }
    hparams = HParams(**overrides)
    csv_path = write_csv(tmp_path / "train.csv", data)
    script = tmp_path / "child.py"
    script.write_text(_CHILD.format(hparams=overrides))
    workdir = tmp_path / "work"
    child = subprocess.Popen(
        [sys.executable, str(script), str(csv_path), str(workdir), str(tmp_path / "out"), str(learners)]
    )
    deadline = time.monotonic() + 90
    while not ckpt.list_checkpoints(workdir):
        assert child.poll() is None, "the child finished before it could be killed"
        assert time.monotonic() < deadline, "no checkpoint appeared in time"
        time.sleep(0.005)
    rng = random.Random()
    pause = rng.uniform(0.0, 0.3)  # a random point after the first checkpoint
    time.sleep(pause)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL, f"the child ended on its own ({pause=:.3f}s)"

    resumed = train(data, workdir=workdir, out_dir=tmp_path / "out", hparams=hparams, learners=learners)
    expected = planned_updates(len(data), hparams, learners)
    assert resumed.resumed == 1
    assert resumed.applied_updates == expected, f"{pause=:.3f}s"
    assert resumed.ps["applied"] == resumed.ps["pushed"] == expected
    if learners == 1:
        reference = train(data, workdir=tmp_path / "ref-work", out_dir=tmp_path / "ref", hparams=hparams)
        assert reference.applied_updates == expected
        want = torch.load(tmp_path / "ref" / WEIGHTS_FILE, weights_only=True)
        got = torch.load(tmp_path / "out" / WEIGHTS_FILE, weights_only=True)
        assert want.keys() == got.keys()
        assert all(torch.equal(want[k], got[k]) for k in want), f"{pause=:.3f}s"


@pytest.mark.slow
def test_no_learner_outlives_a_sigkilled_supervisor(tmp_path: Path) -> None:
    """Learners fork from the trainer's fork server, which exits only after every process it
    forked: each learner watches its pipe from the supervisor instead, and stops at its EOF.
    (Cross-fitting's fold processes, off here, end with their bounded budget.)"""
    overrides = {
        "batch_size": 4,
        "min_updates": 0,
        "max_epochs": 10**6,
        "min_validation_rows": 10**9,
        "cross_fit_folds": 0,
    }
    csv_path = write_csv(tmp_path / "train.csv", synthetic_data(40))
    script = tmp_path / "child.py"
    script.write_text(_CHILD.format(hparams=overrides))
    child = subprocess.Popen(
        [sys.executable, str(script), str(csv_path), str(tmp_path / "work"), str(tmp_path / "out"), "2"]
    )
    deadline = time.monotonic() + 90
    while not ckpt.list_checkpoints(tmp_path / "work"):  # the learners are training by then
        assert child.poll() is None and time.monotonic() < deadline, "the child never checkpointed"
        time.sleep(0.05)
    below = descendants(child.pid)
    assert len(below) >= 3, below  # the fork server and two learners, at least
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    deadline = time.monotonic() + 15
    while any(alive(pid) for pid in below):
        assert time.monotonic() < deadline, f"still running: {[p for p in below if alive(p)]}"
        time.sleep(0.05)
