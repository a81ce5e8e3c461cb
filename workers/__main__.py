"""``python -m workers [--quiet] [celery worker options]``: one Celery worker on the training queue.

The solo pool runs the task in the worker's main process, which must not be a daemon: the
trainer starts its own learner processes.
"""

from __future__ import annotations

import os
import socket
import sys

from service.queue import TRAINING_QUEUE
from workers.app import celery_app

_BEFORE_WORKER = ("--quiet", "-q")  # Celery options of its own, not the worker's: no start-up banner


def main(argv: list[str] | None = None) -> None:
    """Run the worker until it is told to stop (SIGTERM: finish or checkpoint the job, then exit)."""
    options = sys.argv[1:] if argv is None else argv
    celery_app.worker_main(
        [
            *(option for option in options if option in _BEFORE_WORKER),
            "worker",
            "--pool=solo",
            "--concurrency=1",
            f"--queues={TRAINING_QUEUE}",
            f"--hostname=taas-{os.getpid()}@{socket.gethostname()}",
            "--without-gossip",
            "--without-mingle",
            "--loglevel=INFO",
            *(option for option in options if option not in _BEFORE_WORKER),
        ]
    )


if __name__ == "__main__":
    main()
