"""Producer side of the queues: the API sends ``taas.train(job_id)``,
``taas.evaluate(evaluation_id)`` and ``taas.deliver_webhook(event_id)`` by name.

The service never imports ``workers``; ``workers.tasks`` registers the task under
:data:`TRAIN_TASK`, ``workers.webhooks`` the one under :data:`WEBHOOK_TASK`, which has a queue of
its own so that deliveries never wait behind a training job. Send only after the row is committed:
the row is the truth and the message only wakes a worker, so a lost message is re-sent (by the
reconciler for jobs, by the webhook worker's sweep for events).
"""

from __future__ import annotations

import logging
from functools import lru_cache

from celery import Celery

from service.core.settings import Settings

log = logging.getLogger(__name__)

TRAIN_TASK = "taas.train"
TRAINING_QUEUE = "training"
EVALUATE_TASK = "taas.evaluate"
# Training workers consume this queue too; one of its own, so that an evaluation (seconds) does
# not wait behind every training job queued before it, only for a worker to end its current one.
EVALUATION_QUEUE = "evaluations"
WEBHOOK_TASK = "taas.deliver_webhook"
WEBHOOK_QUEUE = "webhooks"
SEND_TIMEOUT_SECONDS = 3
_SEND_RETRY = {"max_retries": 2, "interval_start": 0.2, "interval_step": 0.5, "interval_max": 1.0}


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
        retry_policy=_SEND_RETRY,
    )


def wake_worker(settings: Settings, job_id: str) -> None:
    """:func:`enqueue_training`, or where the broker cannot take the message, one warning line
    (a Redis outage is not a bug: no traceback). The job stays queued; the reconciler sends
    its message."""
    try:
        enqueue_training(settings, job_id)
    except Exception as exc:
        log.warning("could not enqueue job %s (%s); it stays queued for the reconciler", job_id, exc)


def enqueue_evaluation(settings: Settings, evaluation_id: str) -> None:
    """Send one ``taas.evaluate(evaluation_id)`` message to the evaluation queue (errors as
    :func:`enqueue_training`)."""
    _producer(settings.require_redis_url()).send_task(
        EVALUATE_TASK, args=[evaluation_id], queue=EVALUATION_QUEUE, retry=True, retry_policy=_SEND_RETRY
    )


def wake_evaluator(settings: Settings, evaluation_id: str) -> None:
    """:func:`enqueue_evaluation`, or one warning line where the broker cannot take the message:
    the evaluation stays queued and the reconciler sends its message."""
    try:
        enqueue_evaluation(settings, evaluation_id)
    except Exception as exc:
        log.warning(
            "could not enqueue evaluation %s (%s); it stays queued for the reconciler", evaluation_id, exc
        )


def enqueue_webhook(settings: Settings, event_id: str) -> None:
    """Send one ``taas.deliver_webhook(event_id)`` message to the webhook queue (errors as
    :func:`enqueue_training`)."""
    _producer(settings.require_redis_url()).send_task(
        WEBHOOK_TASK, args=[event_id], queue=WEBHOOK_QUEUE, retry=True, retry_policy=_SEND_RETRY
    )


@lru_cache(maxsize=4)
def _producer(broker_url: str) -> Celery:
    app = Celery("taas-producer", broker=broker_url, set_as_current=False)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        broker_connection_timeout=3,
        # A Redis that takes connections and never answers (stopped, a black-holed network) held
        # a send for ever: without a socket timeout, kombu's LPUSH waited on its reply, the
        # API's create with a database connection in hand (15 of them emptied the pool).
        broker_transport_options={"socket_timeout": SEND_TIMEOUT_SECONDS, "socket_connect_timeout": 3},
        broker_connection_retry_on_startup=False,
        task_default_queue=TRAINING_QUEUE,
    )
    return app
