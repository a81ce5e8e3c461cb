"""The webhook delivery task: one attempt to deliver a classifier status event.

The task is a thin shell around :func:`service.webhooks.delivery.deliver`, which takes the attempt with a
compare-and-set, so a duplicate message does nothing. A failed attempt is retried with
``Task.retry(countdown=...)`` after the back-off that the attempt recorded, and so is one put off
because its tenant already has ``webhook_tenant_concurrency`` attempts in flight; the cap on attempts
lives in the database (``webhook_max_attempts``), not in Celery's ``max_retries``, so it holds
across messages that the sweep re-sends (``workers.webhook_worker``). The task has a queue of its
own, ``webhooks``, which only the webhook worker consumes: a delivery never waits behind a
training job, and a training worker never runs one.
"""

from __future__ import annotations

import logging

from celery import Task
from sqlalchemy.orm import Session, sessionmaker

from service.core.db import session_factory, shared_engine
from service.core.settings import get_settings
from service.training.queue import WEBHOOK_QUEUE, WEBHOOK_TASK
from service.webhooks import delivery
from workers.app import celery_app

log = logging.getLogger(__name__)


@celery_app.task(
    name=WEBHOOK_TASK,
    bind=True,
    queue=WEBHOOK_QUEUE,
    acks_late=False,  # a lost message is the sweep's to re-send, not Redis's visibility timeout
    ignore_result=True,
    max_retries=None,  # the cap is webhook_max_attempts, counted in the database
)
def deliver_webhook(self: Task, event_id: str, put_offs: int = 0) -> None:
    """Make the next delivery attempt of status event ``event_id``, if it is due; schedule the
    one after it when this one failed, or this one when its tenant had no slot free (its
    ``put_offs`` in a row lengthen the wait). Returns quietly when there is nothing to do."""
    with _sessions()() as session:
        attempted = delivery.deliver(session, get_settings(), event_id, put_offs=put_offs)
    if attempted is None:
        return
    if isinstance(attempted, delivery.Busy):  # its tenant's other attempts hold its slots
        raise self.retry(countdown=attempted.retry_in, kwargs={"put_offs": put_offs + 1})
    log.info(
        "event %s attempt %d: %s",
        event_id,
        attempted.attempt,
        # a receiver's reply is in the error: its line ends escaped, or it could write log lines
        (attempted.error or f"delivered (HTTP {attempted.status_code})")
        .encode("unicode_escape")
        .decode("ascii"),
    )
    if attempted.retry_in is not None:
        raise self.retry(countdown=attempted.retry_in, kwargs={"put_offs": 0})


def _sessions() -> sessionmaker[Session]:
    # one engine per process, its pool shared by the delivery threads, not one per task
    return session_factory(shared_engine(get_settings()))
