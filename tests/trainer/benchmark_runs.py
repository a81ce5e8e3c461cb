"""Run a script of benchmarks/ as a user runs it and read its JSON lines (imported by tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def run_script(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python benchmarks/<script> <args>`` as a user runs it, whatever its exit status."""
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args], capture_output=True, text=True, timeout=300
    )


def run_benchmark(script: str, *args: str) -> list[dict[str, object]]:
    """The JSON lines that ``python benchmarks/<script> <args>`` prints (it must exit 0)."""
    ran = run_script(script, *args)
    ran.check_returncode()
    return [json.loads(line) for line in ran.stdout.splitlines()]
