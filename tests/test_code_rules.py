"""The house rules that a machine can check: lint and formatting (ruff, the code blocks of
the Markdown docs included), types (mypy) and the import layers (import-linter).

They run inside ``pytest`` so that the one test command of the README checks them too.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    found = BIN / name
    return str(found) if found.exists() else (shutil.which(name) or name)


def test_ruff_finds_nothing() -> None:
    run = subprocess.run([_tool("ruff"), "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_ruff_format_would_change_nothing() -> None:
    run = subprocess.run([_tool("ruff"), "format", "--check", "."], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_import_layers_are_kept() -> None:
    run = subprocess.run([_tool("lint-imports")], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.slow
def test_mypy_finds_no_type_errors() -> None:
    # [tool.mypy] in pyproject.toml: service, workers and trainer, with the pydantic plugin
    run = subprocess.run([_tool("mypy")], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
