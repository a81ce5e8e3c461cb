"""The images' Python install steps, run without Docker: every ``pip install`` line of each
Dockerfile's build stage, word for word (the pytorch.org index option dropped; this machine's
pip supplies the pinned torch as a local CPU wheel), into a fresh venv, then ``taas --help``,
the migrations found, boto3 importable. About 60 s per distinct install on the 2-core machine.

Once the index option is dropped, the images' steps may be the very same commands: each
distinct replay runs once, for every Dockerfile that gives it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy.helpers import DOCKERFILES, install_check

pytestmark = pytest.mark.slow


def _distinct_replays() -> list[list[Path]]:
    """The Dockerfiles grouped by their replayed build stage, in DOCKERFILES' order."""
    groups: dict[tuple[str, tuple[tuple[str, str], ...]], list[Path]] = {}
    for dockerfile in DOCKERFILES:
        stage = install_check.replayed(dockerfile)
        groups.setdefault((stage.workdir, tuple(stage.steps)), []).append(dockerfile)
    return list(groups.values())


@pytest.mark.parametrize(
    "dockerfiles", _distinct_replays(), ids=lambda group: "+".join(p.name for p in group)
)
def test_image_install_steps_run_in_a_fresh_venv(dockerfiles: list[Path], tmp_path: Path) -> None:
    timings = install_check.replay(dockerfiles[0], tmp_path / "image", timeout=500)
    assert timings["total"] < 600, timings
