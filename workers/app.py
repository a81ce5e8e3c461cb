"""The workers' Celery application, configured from :class:`service.core.settings.Settings` on first use.

Celery reads the configuration lazily (``add_defaults`` with a callable), so importing this module
needs no environment; the broker URL is required only when the app first talks to Redis.
"""

from __future__ import annotations

from collections.abc import Sequence

from celery import Celery

from service.core.settings import get_settings
from service.training.queue import TRAINING_QUEUE

# Redis redelivers an unacknowledged message after this long. The job lease in the database,
# not Redis, detects a crashed worker (a reconciler re-enqueues expired leases), so this only has
# to outlast the longest training job: redelivering a job that is still training would park a
# second worker on a claim it cannot win.
VISIBILITY_TIMEOUT_SECONDS = 7 * 24 * 3600


def _configuration() -> dict[str, object]:
    settings = get_settings()
    return {
        "broker_url": settings.require_redis_url(),
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": {"visibility_timeout": VISIBILITY_TIMEOUT_SECONDS},
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_ignore_result": True,
        "task_serializer": "json",
        "accept_content": ["json"],
        "task_default_queue": TRAINING_QUEUE,
        "worker_prefetch_multiplier": 1,
        "enable_utc": True,
        "imports": ["workers.tasks", "workers.webhooks"],
    }


celery_app = Celery("taas", set_as_current=False)
celery_app.add_defaults(_configuration)


_BEFORE_WORKER = ("--quiet", "-q")  # Celery's own options, not its worker's: no start-up banner
# Worker options that taas sets and a caller may not change (long form: short form): one job at
# a time in the worker's main process (the trainer starts its own processes), on the training
# queue, under the hostname its lease owner id is made of. Celery takes the last of a repeated
# option, so a caller's --pool prefork would silently replace the solo pool.
_FIXED = {"--pool": "-P", "--concurrency": "-c", "--queues": "-Q", "--hostname": "-n"}


def fixed_option(extra: Sequence[str]) -> str | None:
    """The first of a caller's ``extra`` worker options that would change one taas fixes."""
    for option in extra:
        name = option.split("=", 1)[0]
        if name in _FIXED or any(option.startswith(short) for short in _FIXED.values()):
            return option
    return None


def worker_argv(fixed: Sequence[str], extra: Sequence[str]) -> list[str]:
    """``celery_app.worker_main``'s argv: the ``fixed`` worker options, then a caller's ``extra``
    ones, with Celery's own ``--quiet`` moved before the sub-command, where Celery reads it."""
    return [
        *(option for option in extra if option in _BEFORE_WORKER),
        "worker",
        *fixed,
        *(option for option in extra if option not in _BEFORE_WORKER),
    ]
