"""The processes of `taas up` that never train or serve start without torch: importing it and
the training engine cost each some 1.3-1.7 s of CPU at every start (and `taas up` starts them
again after a crash), for code they never run."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT


def _loads_torch(code: str) -> bool:
    env = {**os.environ, "TAAS_REDIS_URL": "redis://127.0.0.1:9/0"}  # never connected to
    ran = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint('torch' in sys.modules)"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return ran.stdout.strip().splitlines()[-1] == "True"


@pytest.mark.parametrize(
    "code",
    [
        "import workers.reconciler",
        "import workers.webhook_worker",
        # the webhook worker's Celery app loads only its queue's task module
        "from workers.webhook_worker import celery_app, webhook_tasks_only\n"
        "webhook_tasks_only()\ncelery_app.loader.import_default_modules()",
        # `taas up`: the commands, and its check that the sentence encoder's files are installed
        "import service.cli.commands\nfrom trainer.encoder import ENCODERS\n"
        "[spec.files() for spec in ENCODERS.values()]",
    ],
    ids=["reconciler", "webhook-worker", "webhook-worker-tasks", "taas-up"],
)
def test_a_process_that_never_trains_or_serves_does_not_import_torch(code: str) -> None:
    assert not _loads_torch(code)


def test_the_trainers_names_still_load_on_first_use() -> None:
    assert _loads_torch("from trainer import train\nfrom trainer.encoder import shared_encoder")
