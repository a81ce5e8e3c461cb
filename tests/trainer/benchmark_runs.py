"""Run a script of benchmarks/ as a user runs it and read its JSON lines (imported by tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def run_benchmark(script: str, *args: str) -> list[dict[str, object]]:
    """The JSON lines that ``python benchmarks/<script> <args>`` prints (it must exit 0)."""
    ran = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return [json.loads(line) for line in ran.stdout.splitlines()]
