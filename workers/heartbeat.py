"""This worker process in the registry of live workers (:mod:`service.training.worker_registry`).

When Celery says a training worker is ready (``worker_ready``; workers of other queues, such as
the webhook worker, are not listed) a :class:`Heartbeat` starts: a daemon thread that publishes
the worker's entry — identity, host, pid, device, K, current job — every ``heartbeat_seconds``
with an expiry of three beats, so the entry of a killed worker vanishes within three beats. The
train task wraps each job in :func:`training`, which shows the job at once. On
``worker_shutdown`` the thread stops and the entry is deleted. A Redis outage never reaches the
worker: the thread logs it and tries again at the next beat.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import redis
import torch
from celery.signals import worker_ready, worker_shutdown
from celery.worker.consumer import Consumer

from service.core.settings import Settings, get_settings
from service.training.queue import TRAINING_QUEUE
from service.training.worker_registry import WorkerInfo, WorkerRegistry, connect
from trainer.hparams import DEFAULT_HPARAMS
from trainer.learner_count import default_learners
from trainer.ps.cuda import cuda_learners

log = logging.getLogger(__name__)

TTL_BEATS = 3  # an entry outlives two missed beats, not three
_STOP_TIMEOUT_S = 10.0  # a beat in flight is bounded by the client's timeouts (~2 s)


def worker_identity() -> str:
    """This process's identity as a lease owner and in the registry: ``hostname:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def describe(settings: Settings) -> WorkerInfo:
    """This process's registry entry, idle, as of now."""
    device = _device(settings.device)
    auto = cuda_learners(DEFAULT_HPARAMS.optimizer) if device.startswith("cuda:") else default_learners()
    learners = settings.learners or auto
    now = time.time()
    return WorkerInfo(
        worker_id=worker_identity(),
        host=socket.gethostname(),
        pid=os.getpid(),
        device=device,
        learners=learners,
        job_id=None,
        started_at=now,
        last_heartbeat=now,
    )


class Heartbeat:
    """Publishes one worker's entry from a daemon thread: ``start()`` once, ``stop()`` at exit."""

    def __init__(self, registry: WorkerRegistry, info: WorkerInfo, *, every: float) -> None:
        self._registry = registry
        self._info = info
        self._every = every
        self._wake = threading.Event()
        self._done = threading.Event()
        self._failing = False
        self._thread = threading.Thread(target=self._run, name="registry-heartbeat", daemon=True)

    @property
    def running(self) -> bool:
        """True while the thread beats."""
        return self._thread.is_alive()

    def start(self) -> None:
        """Publish the entry now and then every ``every`` seconds."""
        self._thread.start()

    def set_job(self, job_id: str | None) -> None:
        """Show ``job_id`` as the current job (None: idle), published at once."""
        self._info = dataclasses.replace(self._info, job_id=job_id)
        self._wake.set()

    def stop(self) -> None:
        """Stop beating and delete the entry (if Redis is down, it expires on its own)."""
        self._done.set()
        self._wake.set()
        self._thread.join(timeout=_STOP_TIMEOUT_S)
        try:
            self._registry.remove(self._info.worker_id)
        except redis.RedisError as error:
            log.warning("worker registry: could not remove %s: %s", self._info.worker_id, error)

    def _run(self) -> None:
        while not self._done.is_set():
            self._wake.clear()
            self._beat()
            self._wake.wait(self._every)

    def _beat(self) -> None:
        info = dataclasses.replace(self._info, last_heartbeat=time.time())
        try:
            self._registry.publish(info, ttl_seconds=TTL_BEATS * self._every)
        except redis.RedisError as error:
            if not self._failing:
                log.warning("worker registry: heartbeat failed, retrying every %.1fs: %s", self._every, error)
            self._failing = True
            return
        if self._failing:
            log.info("worker registry: heartbeat published again")
        self._failing = False


_process: Heartbeat | None = None  # this worker process's heartbeat, once Celery is ready


@worker_ready.connect
def _on_worker_ready(sender: Consumer, **_: object) -> None:
    global _process
    if TRAINING_QUEUE not in {queue.name for queue in sender.task_consumer.queues}:
        return
    settings = get_settings()
    registry = WorkerRegistry(connect(settings.require_redis_url()))
    _process = Heartbeat(registry, describe(settings), every=settings.heartbeat_seconds)
    _process.start()


@worker_shutdown.connect
def _on_worker_shutdown(**_: object) -> None:
    if _process is not None:
        _process.stop()


@contextmanager
def training(job_id: str) -> Iterator[None]:
    """Show ``job_id`` as this worker's current job while the block runs (no-op outside a
    Celery worker)."""
    if _process is None:
        yield
        return
    _process.set_job(job_id)
    try:
        yield
    finally:
        _process.set_job(None)


def _device(setting: str) -> str:
    """Where this worker's jobs train, resolved as the trainer resolves ``TAAS_DEVICE``."""
    if not torch.cuda.is_available() or setting == "cpu":
        return "cuda (unavailable)" if setting == "cuda" else "cpu"
    index = torch.cuda.current_device()
    return f"cuda:{index} {torch.cuda.get_device_name(index)}"
