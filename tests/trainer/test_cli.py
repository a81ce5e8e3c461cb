from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from synthetic import synthetic_data, write_csv

from trainer import checkpoint as ckpt
from trainer.data import read_labelled_csv
from trainer.engine import train
from trainer.hparams import HParams
from trainer.inference import WEIGHTS_FILE


@pytest.mark.slow
def test_fit_then_eval_round_trip(tmp_path: Path) -> None:
    train_csv = write_csv(tmp_path / "train.csv", synthetic_data(15, seed=1))
    test_csv = write_csv(tmp_path / "test.csv", synthetic_data(5, seed=2))
    fit = subprocess.run(
        [sys.executable, "-m", "trainer", "fit", str(train_csv), "--out", str(tmp_path / "model")],
        capture_output=True,
        timeout=120,
    )
    assert fit.returncode == 0, fit.stderr
    assert b"\r" in fit.stderr  # one live progress line, rewritten in place
    summary = json.loads(fit.stdout)
    assert summary["applied_updates"] > 0 and summary["metrics"]["n"] == 45
    assert b"samples/s" in fit.stderr
    assert not (tmp_path / "model.ckpt").exists()  # the default workdir is cleaned up after success

    evaluated = subprocess.run(
        [sys.executable, "-m", "trainer", "eval", str(tmp_path / "model"), str(test_csv)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert evaluated.returncode == 0, evaluated.stderr
    lines = evaluated.stdout.strip().splitlines()
    assert len(lines) == 1
    result = json.loads(lines[0])
    assert set(result) == {"accuracy", "macro_f1", "n"}
    assert result["n"] == 15 and result["accuracy"] >= 0.8


def test_fit_reports_invalid_data_with_its_row(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("text,label\nhello,greet\n,empty\n", encoding="utf-8")
    fit = subprocess.run(
        [sys.executable, "-m", "trainer", "fit", str(bad), "--out", str(tmp_path / "m")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert fit.returncode == 1
    assert "row 3" in fit.stderr


@pytest.mark.parametrize("command", ["fit", "eval"])
def test_a_file_that_is_not_there_is_one_error_line(tmp_path: Path, command: str) -> None:
    """A traceback of FileNotFoundError, before."""
    missing = str(tmp_path / "missing.csv")
    args = [missing, "--out", str(tmp_path / "m")]
    if command == "eval":
        rows = read_labelled_csv(write_csv(tmp_path / "train.csv", synthetic_data(5, seed=1)))
        hparams = HParams(min_updates=20, max_epochs=1, cross_fit_folds=0)
        train(rows, workdir=tmp_path / "w", out_dir=tmp_path / "m", hparams=hparams)
        args = [str(tmp_path / "m"), missing]
    ran = subprocess.run(
        [sys.executable, "-m", "trainer", command, *args], capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 1
    assert ran.stderr.strip().splitlines()[-1].startswith("error: ") and "Traceback" not in ran.stderr
    assert "missing.csv" in ran.stderr


_CHILD = """
import sys, time
from pathlib import Path
from trainer.data import read_labelled_csv
from trainer.engine import train
from trainer.hparams import HParams
hparams = HParams(**{hparams!r})
def slow_stop():
    time.sleep(0.002)  # slows the child so the parent can kill it mid-run; weights are unaffected
    return False
train(read_labelled_csv(Path(sys.argv[1])), workdir=Path(sys.argv[2]), out_dir=Path(sys.argv[3]),
      hparams=hparams, should_stop=slow_stop)
"""


@pytest.mark.slow
def test_sigkilled_training_resumes_to_the_uninterrupted_result(tmp_path: Path) -> None:
    data = synthetic_data(20)
    csv_path = write_csv(tmp_path / "train.csv", data)
    overrides = {
        "batch_size": 4,
        "min_updates": 600,
        "max_epochs": 1,
        "embedding_dim": 8,
        "checkpoint_every_updates": 40,
        "checkpoint_every_seconds": 3600.0,
    }
    hparams = HParams(**overrides)
    reference = train(data, workdir=tmp_path / "ref-work", out_dir=tmp_path / "ref", hparams=hparams)

    workdir = tmp_path / "work"
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _CHILD.format(hparams=overrides),
            str(csv_path),
            str(workdir),
            str(tmp_path / "out"),
        ],
    )
    deadline = time.monotonic() + 60
    while len(ckpt.list_checkpoints(workdir)) < 2 or ckpt.list_checkpoints(workdir)[0][0] < 200:
        assert child.poll() is None, "the child finished before it could be killed"
        assert time.monotonic() < deadline, "no checkpoint appeared in time"
        time.sleep(0.01)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL

    resumed = train(data, workdir=workdir, out_dir=tmp_path / "out", hparams=hparams)
    assert resumed.resumed == 1
    assert resumed.applied_updates == reference.applied_updates
    expected = torch.load(tmp_path / "ref" / WEIGHTS_FILE, weights_only=True)
    actual = torch.load(tmp_path / "out" / WEIGHTS_FILE, weights_only=True)
    assert all(torch.equal(expected[k], actual[k]) for k in expected)
