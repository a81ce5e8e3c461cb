"""benchmarks/cold_classify.py run as a user runs it: a platform of encoder classifiers, each one's
first classify timed, and the API's memory as the encoder and the models load."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "cold_classify.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=400)


def test_one_classifier_is_refused_with_the_reason() -> None:
    ran = _run("--classifiers", "1")
    assert ran.returncode == 2
    assert "--classifiers 1: at least 2" in ran.stderr


@pytest.mark.slow
def test_the_first_classify_loads_the_encoder_and_later_ones_only_their_model() -> None:
    ran = _run("--classifiers", "2", "--json")
    assert ran.returncode == 0, ran.stderr[-3000:]
    result = json.loads(ran.stdout)
    memory = result["api_rss_bytes"]
    # the encoder's 90 MB of weights are read at the first call, not before
    assert memory["encoder"] - memory["started"] > 50 * 2**20
    assert result["first_ms"] > result["cold_ms"]["max"] > 0
    assert result["warm_ms"]["median"] > 0
