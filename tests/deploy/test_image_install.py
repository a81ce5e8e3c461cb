"""The images' Python install steps, run without Docker: every ``pip install`` line of each
Dockerfile's build stage, word for word (the pytorch.org index option dropped; this machine's
pip supplies the pinned torch as a local CPU wheel), into a fresh venv, then ``taas --help``,
the migrations found, boto3 importable. About 45 s per image on the 2-core machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy.helpers import DOCKERFILES, install_check

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_image_install_steps_run_in_a_fresh_venv(dockerfile: Path, tmp_path: Path) -> None:
    timings = install_check.replay(dockerfile, tmp_path / "image", timeout=500)
    assert timings["total"] < 600, timings
