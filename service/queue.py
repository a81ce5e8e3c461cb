"""Producer side of the training queue: the API sends ``taas.train(job_id)`` by name.

The service never imports ``workers``; ``workers.tasks`` registers the task under
:data:`TRAIN_TASK`. Send only after the job row is committed: the row is the truth and the
message only wakes a worker, so a lost message is re-sent by the reconciler.
"""

from __future__ import annotations

from functools import lru_cache

from celery import Celery

from service.settings import Settings

TRAIN_TASK = "taas.train"
TRAINING_QUEUE = "training"


def enqueue_training(settings: Settings, job_id: str) -> None:
    """Send one ``taas.train(job_id)`` message to the training queue.

    Raises RuntimeError when no broker is configured and kombu's OperationalError when the
    broker cannot be reached (after a short, bounded retry).
    """
    _producer(settings.require_redis_url()).send_task(
        TRAIN_TASK,
        args=[job_id],
        queue=TRAINING_QUEUE,
        retry=True,
        retry_policy={"max_retries": 2, "interval_start": 0.2, "interval_step": 0.5, "interval_max": 1.0},
    )


@lru_cache(maxsize=4)
def _producer(broker_url: str) -> Celery:
    app = Celery("taas-producer", broker=broker_url, set_as_current=False)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        broker_connection_timeout=3,
        broker_connection_retry_on_startup=False,
        task_default_queue=TRAINING_QUEUE,
    )
    return app
