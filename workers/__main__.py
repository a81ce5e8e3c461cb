"""``python -m workers [--quiet] [celery worker options]``: one Celery worker on the training and
evaluation queues.

The solo pool runs the task in the worker's main process, which must not be a daemon: the
trainer starts its own learner processes. They fork from the trainer's fork server
(trainer.processes), which this process starts before Celery does, so the server imports the
trainer while the worker connects and the first job does not wait for it.
"""

from __future__ import annotations

import os
import socket
import sys

from service.core.settings import get_settings
from service.training.queue import EVALUATION_QUEUE, TRAINING_QUEUE
from trainer.processes import start_fork_server
from workers.app import celery_app, fixed_option, worker_argv


def main(argv: list[str] | None = None) -> None:
    """Run the worker until it is told to stop (SIGTERM: finish or checkpoint the job, then exit)."""
    extra = sys.argv[1:] if argv is None else argv
    if (option := fixed_option(extra)) is not None:
        sys.exit(f"error: {option}: taas sets the pool, concurrency, queues and hostname of a worker")
    get_settings().apply_umask()  # before the fork server: learners and checkpoints inherit it
    start_fork_server()
    celery_app.worker_main(
        worker_argv(
            [
                "--pool=solo",
                "--concurrency=1",
                f"--queues={TRAINING_QUEUE},{EVALUATION_QUEUE}",
                f"--hostname=taas-{os.getpid()}@{socket.gethostname()}",
                "--without-gossip",
                "--without-mingle",
                "--loglevel=INFO",
            ],
            extra,
        )
    )


if __name__ == "__main__":
    main()
