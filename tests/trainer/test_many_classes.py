"""Data of many classes with a few rows each is learned (benchmarks/many_classes.py, run as a
user runs it). Until the ninth session such data trained without error and stayed near chance:
the model started at a saddle and early stopping saw no better accuracy in time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_250_classes_of_6_rows_each_are_learned() -> None:
    ran = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "many_classes.py"), "250x6"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    row = json.loads(ran.stdout.splitlines()[-1])

    assert row["set"] == "250x6"
    assert row["centroid"] >= 0.95  # the signal is plain: a gap is the trainer's
    # 0.956 measured; 0.844 with the old start (both factors uniform in ±1/64)
    assert row["accuracy"] >= 0.9, row
