"""``python -m workers.webhook_worker [--quiet] [celery worker options]``: the webhook worker.

One Celery worker on the ``webhooks`` queue only, with a pool of threads (a delivery waits on the
network, not the CPU), running ``workers.webhooks.deliver_webhook``; beside it, a sweep thread
runs the relay (:func:`service.webhooks.delivery.send_due`) every ``webhook_sweep_seconds``: it sends the
status events that training workers and the reconciler recorded, and re-sends any whose message
was lost (Redis restarted, a worker killed with an attempt or a retry in hand). Any number may
run: an attempt is a compare-and-set. `taas up` runs one as a child; `taas webhooks` runs one in
production.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading

import redis
from kombu.exceptions import OperationalError as KombuOperationalError
from sqlalchemy.exc import SQLAlchemyError

from service.core.db import make_engine, session_factory
from service.core.settings import Settings, get_settings
from service.training.queue import WEBHOOK_QUEUE
from service.webhooks import delivery
from workers.app import celery_app, worker_argv

log = logging.getLogger(__name__)


def sweep_forever(settings: Settings, stop: threading.Event) -> None:
    """Run the relay every ``webhook_sweep_seconds`` until ``stop``; an unreachable database or
    broker is logged and tried again on the next pass."""
    engine = make_engine(settings)
    sessions = session_factory(engine)
    try:
        while not stop.wait(settings.webhook_sweep_seconds):
            try:
                with sessions() as session:
                    sent = delivery.send_due(session, settings)
                if sent:
                    log.info("webhook sweep: sent %d event(s)", len(sent))
            except (SQLAlchemyError, redis.RedisError, KombuOperationalError, OSError) as error:
                log.warning("webhook sweep: %s", str(error).splitlines()[0])
    finally:
        engine.dispose()


def webhook_tasks_only() -> None:
    """Have the Celery app load its queue's task module alone: the training tasks' module would
    load torch and the trainer here (some 1.5 s of CPU at every start) for messages this worker
    never takes."""
    celery_app.conf.imports = ("workers.webhooks",)


def main(argv: list[str] | None = None) -> None:
    """Run the webhook worker and its sweep until SIGTERM (warm shutdown: Celery puts the
    messages it holds back on the queue)."""
    settings = get_settings()
    settings.apply_umask()
    settings.require_redis_url()
    logging.getLogger("httpx").setLevel(logging.WARNING)  # the task logs each attempt itself
    webhook_tasks_only()
    stop = threading.Event()
    threading.Thread(target=sweep_forever, args=(settings, stop), name="webhook-sweep", daemon=True).start()
    try:
        celery_app.worker_main(
            worker_argv(
                [
                    "--pool=threads",
                    f"--concurrency={settings.webhook_concurrency}",
                    f"--queues={WEBHOOK_QUEUE}",
                    f"--hostname=taas-webhooks-{os.getpid()}@{socket.gethostname()}",
                    "--without-gossip",
                    "--without-mingle",
                    "--loglevel=INFO",
                ],
                sys.argv[1:] if argv is None else argv,
            )
        )
    finally:
        stop.set()


if __name__ == "__main__":
    main()
