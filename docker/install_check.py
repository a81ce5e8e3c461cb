"""Run the install steps of a Dockerfile's build stage without Docker, into a fresh venv.

CI machines here have the Docker client but no engine, so the images cannot be built. This
replays what the build stage does to Python: the venv (``python -m venv /opt/taas``), the
``COPY`` of the build context into ``WORKDIR`` and every ``RUN`` that calls ``pip install``,
word for word, with two substitutions:

* the image paths (``/opt/taas``, ``/app``) become folders under ``--root``;
* ``--index-url`` / ``--extra-index-url`` options pointing at download.pytorch.org are dropped:
  that index is not reachable here, and this machine's pip configuration supplies the same
  ``torch==2.13.0`` pin as a local CPU wheel. (So the worker line checks the pin and the rest of
  the resolution, not the CUDA wheel itself.)

Then it checks that the result imports and runs: ``taas --help``, ``alembic`` finds the
migrations, boto3 (the ``s3`` extra) imports.

    python docker/install_check.py docker/Dockerfile.api [--root DIR] [--keep]
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
VENV_IN_IMAGE = "/opt/taas"
PYTORCH_INDEX = re.compile(r"\s--(?:extra-)?index-url[ =]https://download\.pytorch\.org/\S*")


@dataclass
class BuildStage:
    """The instructions of a Dockerfile's first stage that matter to the Python install."""

    workdir: str = "/"
    steps: list[tuple[str, str]] = field(default_factory=list)  # ("COPY", "src dest") / ("RUN", cmd)


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` pairs, continuation lines joined, comments dropped."""
    result: list[tuple[str, str]] = []
    buffer = ""
    for raw in dockerfile.read_text().splitlines():
        line = raw.strip()
        if not buffer and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            buffer += line[:-1] + " "
            continue
        buffer += line
        keyword, _, rest = buffer.partition(" ")
        result.append((keyword.upper(), rest.strip()))
        buffer = ""
    return result


def build_stage(dockerfile: Path) -> BuildStage:
    """The first stage (``FROM ... AS build`` up to the next ``FROM``)."""
    stage = BuildStage()
    seen_from = 0
    for keyword, args in instructions(dockerfile):
        if keyword == "FROM":
            seen_from += 1
            if seen_from > 1:
                break
        elif seen_from == 1 and keyword == "WORKDIR":
            stage.workdir = args
        elif seen_from == 1 and keyword == "COPY" and not args.startswith("--from"):
            stage.steps.append(("COPY", args))
        elif seen_from == 1 and keyword == "RUN" and "pip install" in args:
            stage.steps.append(("RUN", args))
    return stage


def pip_lines(dockerfile: Path) -> list[str]:
    """The ``RUN`` commands of the build stage that install with pip, as written."""
    return [args for kind, args in build_stage(dockerfile).steps if kind == "RUN"]


def replayed(dockerfile: Path) -> BuildStage:
    """The build stage as :func:`replay` runs it: the pytorch.org index options dropped from its
    ``RUN`` lines. Two Dockerfiles with equal replays check the same install here."""
    stage = build_stage(dockerfile)
    steps = [
        (kind, PYTORCH_INDEX.sub("", " " + args).strip() if kind == "RUN" else args)
        for kind, args in stage.steps
    ]
    return BuildStage(stage.workdir, steps)


def replay(dockerfile: Path, root: Path, *, timeout: float = 900.0) -> dict[str, float]:
    """Replay the build stage's Python install under ``root``; returns timings in seconds."""
    stage = replayed(dockerfile)
    venv = root / "opt" / "taas"
    app = root / stage.workdir.lstrip("/")
    app.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    started = time.monotonic()
    base_python = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base_python, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("VIRTUAL_ENV", "PYTHONPATH", "PIP_REQUIRE_VIRTUALENV"))
    }
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(venv),
        PIP_NO_CACHE_DIR="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    timings["venv"] = time.monotonic() - started
    for number, (kind, args) in enumerate(stage.steps):
        if kind == "COPY":
            *sources, dest = shlex.split(args)
            target = app / dest if not dest.startswith("/") else root / dest.lstrip("/")
            for source in sources:
                path = REPO_ROOT / source
                if path.is_dir():
                    shutil.copytree(
                        path,
                        target / path.name if dest.endswith("/") else target,
                        dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__"),
                    )
                else:
                    (target if dest.endswith("/") or target.is_dir() else target.parent).mkdir(
                        parents=True, exist_ok=True
                    )
                    shutil.copy2(path, target / path.name if dest.endswith("/") else target)
            continue
        command = args.replace(VENV_IN_IMAGE, str(venv))
        begun = time.monotonic()
        run = subprocess.run(
            ["sh", "-ec", command], cwd=app, env=env, capture_output=True, text=True, timeout=timeout
        )
        timings[f"step {number}: {args[:60]}"] = time.monotonic() - begun
        if run.returncode != 0:
            output = f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
            raise RuntimeError(f"{dockerfile.name}: `{command}` failed ({run.returncode}):\n{output}")
    checks = [
        [str(venv / "bin" / "taas"), "--help"],
        [str(venv / "bin" / "python"), "-c", "import boto3, torch, service.storage.s3, workers.tasks"],
        [
            str(venv / "bin" / "python"),
            "-c",
            "from service.cli.migrations import MIGRATIONS as m; assert (m / 'env.py').is_file(), m",
        ],
    ]
    for check in checks:
        run = subprocess.run(check, cwd=root, env=env, capture_output=True, text=True, timeout=120)
        if run.returncode != 0:
            output = f"{run.stdout[-2000:]}\n{run.stderr[-2000:]}"
            raise RuntimeError(f"{dockerfile.name}: {check[-1]} failed:\n{output}")
    timings["total"] = time.monotonic() - started
    return timings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dockerfile", type=Path, nargs="+")
    parser.add_argument("--root", type=Path, help="where to build (default: a temp dir, removed)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir")
    options = parser.parse_args()
    for dockerfile in options.dockerfile:
        root = options.root or Path(tempfile.mkdtemp(prefix="taas-install-"))
        try:
            timings = replay(dockerfile.resolve(), root / dockerfile.name)
        finally:
            if not options.keep and not options.root:
                shutil.rmtree(root, ignore_errors=True)
        sys.stdout.write(f"{dockerfile}: ok ({timings['total']:.0f} s)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
