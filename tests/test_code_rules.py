"""The house rules that a machine can check: lint and formatting (ruff, the code blocks of
the Markdown docs included), types (mypy), the import layers (import-linter), no import
cycle among the modules of ``service`` (grimp, import-linter's graph) and no production
module over ``MAX_MODULE_LINES`` lines.

They run inside ``pytest`` so that the one test command of the README checks them too.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PRODUCTION_PACKAGES = ("trainer", "service", "workers")
MAX_MODULE_LINES = 500


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


def test_no_production_module_is_over_500_lines() -> None:
    # One concept per module (STYLE.md splits past ~400 lines): trainer/engine.py had grown to
    # 1,084 lines before issue 52 split it. A module over the bound is split along its seams;
    # there is no list of exemptions.
    long = {
        path.relative_to(ROOT).as_posix(): lines
        for package in PRODUCTION_PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines, to split along their seams: " + ", ".join(
        f"{name} ({lines} lines)" for name, lines in long.items()
    )


def test_service_modules_import_no_cycle() -> None:
    # A cycle (service.store and service.artifacts once imported each other) means neither module
    # can be read, tested or loaded without the other; the layers contract keeps the rooms in
    # order, this keeps the modules inside each room in order too.
    graph = grimp.build_graph("service", cache_dir=None)
    cycle = _a_cycle({module: graph.find_modules_directly_imported_by(module) for module in graph.modules})
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def _a_cycle(imports: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``imports`` (module -> the modules it imports), as the path that closes it,
    or None: a depth-first walk that meets a module still on its path."""
    done: set[str] = set()
    for start in sorted(imports):
        if start in done:
            continue
        path = [start]
        stack = [sorted(imports[start])]  # per module on the path, the imports still to walk
        while stack:
            if not stack[-1]:
                stack.pop()
                done.add(path.pop())
                continue
            imported = stack[-1].pop()
            if imported in path:
                return [*path[path.index(imported) :], imported]
            if imported in imports and imported not in done:
                path.append(imported)
                stack.append(sorted(imports[imported]))
    return None


@pytest.mark.slow
def test_mypy_finds_no_type_errors() -> None:
    # [tool.mypy] in pyproject.toml: service, workers and trainer, with the pydantic plugin
    run = subprocess.run([_tool("mypy")], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
