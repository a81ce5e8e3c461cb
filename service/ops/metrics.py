"""Prometheus metrics of one API process, served at ``GET /metrics``.

Two kinds, so that a request never pays for the database:

* **per request** (:class:`MetricsMiddleware`): one counter increment and one histogram
  observation by route template — ``taas_http_requests_total``,
  ``taas_http_request_duration_seconds`` and, for the classify routes,
  ``taas_classify_latency_seconds``;
* **per process, at scrape time** (:class:`_EncoderCollector`): each shared sentence encoder
  this process has loaded, its resident bytes and the calls and texts it has encoded
  (``taas_encoder_*``: a classify batch of several tenants' texts is one call); and per
  classifier the texts answered with an out-of-scope decision and those judged out of scope
  (:class:`_OutOfScopeCollector`, ``taas_classify_scoped_texts`` and
  ``taas_classify_out_of_scope_texts``, counted by service.serving.out_of_scope_counts);
* **at scrape time** (:class:`_PlatformCollector`): queue depth, jobs by state, and for jobs
  training now or ended within the last 5 minutes (``SERIES_AFTER_END``) their samples/s,
  parameter-server counters and staleness histogram (their progress read only when their row
  changed: ``observe.ProgressDigests``), and each worker's last sign of life within the hour
  (``service.ops.observe``), read from the database; and the live workers of the registry in Redis
  (``service.training.worker_registry``): how many, and each one's seconds since its last heartbeat.

Each app has its own registry (tests build many apps). With several API replicas every replica
serves its own request series and the same platform series: scrape each replica and aggregate
the request series with ``sum by (route)``; take the platform series from any one (``max``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import redis
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.orm import Session, sessionmaker
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.core.models import JobState, utcnow
from service.ops import observe
from service.serving.out_of_scope_counts import OutOfScopeCounts
from service.training.worker_registry import WorkerInfo, WorkerRegistry
from trainer.encoder import loaded_encoders

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
SERIES_AFTER_END = timedelta(minutes=5)  # how long a job's own series outlive its training
STALENESS_BUCKETS = ("0", "1", "2", "3", "4-7", "8-15", "16+")  # trainer.ps.counters' histogram
_CLASSIFY_ROUTES = (
    "/v1/classifiers/{classifier_id}/classify",
    "/v1/classifiers/{classifier_id}/classify_collection",
)
_UNMATCHED = "<unmatched>"


class Metrics:
    """The metric objects of one app, registered in their own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "taas_http_requests",
            "HTTP requests answered, by method, route template and status code.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "taas_http_request_duration_seconds",
            "Time to answer an HTTP request, by method and route template.",
            ["method", "route"],
            registry=self.registry,
        )
        self.classify_latency = Histogram(
            "taas_classify_latency_seconds",
            "Time to answer a classify call (single text or collection), successful or not.",
            ["route"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
            registry=self.registry,
        )

        self._series: dict[tuple[str, str, int], tuple[Any, ...]] = {}
        self._platform = _PlatformCollector()
        self.registry.register(self._platform)
        self.registry.register(_EncoderCollector())
        self.out_of_scope = OutOfScopeCounts()  # classify replies count into it
        self.registry.register(_OutOfScopeCollector(self.out_of_scope))

    def watch_platform(self, sessions: sessionmaker[Session] | None, client: redis.Redis | None) -> None:
        """Read the scrape-time series from the database behind ``sessions`` and the worker
        registry in ``client``'s Redis (None: stop, or no registry series)."""
        self._platform.sessions = sessions
        self._platform.registry = None if client is None else WorkerRegistry(client)

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one answered request."""
        series = self._series.get((method, route, status))
        if series is None:
            series = self._series[(method, route, status)] = self._children(method, route, status)
        count, *latencies = series
        count.inc()
        for latency in latencies:
            latency.observe(seconds)

    def _children(self, method: str, route: str, status: int) -> tuple[Any, ...]:
        # Resolving labels takes a lock and checks them on every call: done once per series
        # (routes are templates, so there are few), it is no longer part of each request.
        children: tuple[Any, ...] = (
            self.requests.labels(method, route, str(status)),
            self.latency.labels(method, route),
        )
        if route in _CLASSIFY_ROUTES:
            children += (self.classify_latency.labels(route.rsplit("/", 1)[-1]),)
        return children

    def exposition(self) -> bytes:
        """Every series in the Prometheus text format."""
        return generate_latest(self.registry)


class MetricsMiddleware:
    """Pure ASGI middleware timing each HTTP request by its route template (cheap: no I/O)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = getattr(scope.get("route"), "path", _UNMATCHED)
            self.metrics.observe(scope["method"], route, status, time.perf_counter() - started)


class _EncoderCollector(Collector):
    """The sentence encoders this process shares among its models (none until one is loaded)."""

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        resident = GaugeMetricFamily(
            "taas_encoder_resident_bytes",
            "Weights of each sentence encoder loaded in this process.",
            labels=["encoder"],
        )
        calls = CounterMetricFamily(
            "taas_encoder_calls",
            "Encoder calls of this process (one per classify batch, whatever the tenants in it).",
            labels=["encoder"],
        )
        texts = CounterMetricFamily(
            "taas_encoder_texts", "Texts this process has encoded.", labels=["encoder"]
        )
        for name, encoder in loaded_encoders().items():
            resident.add_metric([name], encoder.nbytes)
            calls.add_metric([name], encoder.calls)
            texts.add_metric([name], encoder.texts)
        yield from (resident, calls, texts)


class _OutOfScopeCollector(Collector):
    """Per classifier, the texts classify answered with an out-of-scope decision, and of those
    the ones judged out of scope (none until a reply of a model with the decision)."""

    def __init__(self, counts: OutOfScopeCounts) -> None:
        self.counts = counts

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        answered = CounterMetricFamily(
            "taas_classify_scoped_texts",
            "Texts this process classified with an in-scope score, by classifier.",
            labels=["classifier_id"],
        )
        out_of_scope = CounterMetricFamily(
            "taas_classify_out_of_scope_texts",
            "Texts this process judged out of scope (in none of the classes), by classifier.",
            labels=["classifier_id"],
        )
        for classifier_id, texts, out in self.counts.snapshot():
            answered.add_metric([classifier_id], texts)
            out_of_scope.add_metric([classifier_id], out)
        yield from (answered, out_of_scope)


class _PlatformCollector(Collector):
    """Series computed from the database at each scrape."""

    def __init__(self) -> None:
        self.sessions: sessionmaker[Session] | None = None  # set while the app runs
        self.registry: WorkerRegistry | None = None
        self.digests = observe.ProgressDigests()  # its own: it reads fewer jobs than the dashboard

    def describe(self) -> list[Metric]:
        return []  # no query at registration: the series are unknown until a scrape

    def collect(self) -> Iterator[Metric]:
        if self.sessions is None:
            return
        now = utcnow()
        with self.sessions() as session:
            counts = observe.job_counts(session)
            jobs = observe.recent_jobs(session, now=now)
            workers = observe.workers_seen(session, jobs)
            # a series per job only while it trains and for a while after, for a scrape to see
            # its last values: the hour's finished jobs made a 3 MB scrape of 66,000 series
            shown = [
                job
                for job in jobs
                if job.state == JobState.TRAINING.value or job.updated_at >= now - SERIES_AFTER_END
            ]
            digests = self.digests.of(session, shown)
        queue = GaugeMetricFamily("taas_queue_depth", "Training jobs waiting for a worker (queued).")
        queue.add_metric([], counts[JobState.QUEUED.value])
        jobs_by_state = GaugeMetricFamily("taas_jobs", "Training jobs by state.", labels=["state"])
        for state, count in counts.items():
            jobs_by_state.add_metric([state], count)
        heartbeat = GaugeMetricFamily(
            "taas_worker_last_heartbeat_timestamp_seconds",
            "Unix time of each worker's last lease renewal, progress report or timeline event "
            "(workers seen within the hour).",
            labels=["worker"],
        )
        for worker in workers:
            heartbeat.add_metric([worker.worker], worker.last_seen.timestamp())
        yield from (queue, jobs_by_state, heartbeat)
        yield from _training_series(digests)
        if self.registry is not None:
            try:
                alive = self.registry.alive()
            except redis.RedisError as error:  # the series go absent; the rest still scrapes
                log.warning("metrics: worker registry unreachable: %s", error)
            else:
                yield from _registry_series(alive, now=time.time())


def _training_series(digests: dict[str, observe.JobDigest]) -> Iterator[Metric]:
    rate = GaugeMetricFamily(
        "taas_training_samples_per_second",
        "Training examples per second last reported by each job training now or within the last 5 minutes.",
        labels=["job_id"],
    )
    updates = CounterMetricFamily(
        "taas_ps_updates",
        "Parameter-server gradient updates of each job training now or within the last 5 minutes "
        "(pushed, applied).",
        labels=["job_id", "kind"],
    )
    staleness = CounterMetricFamily(
        "taas_ps_staleness_updates",
        "Applied updates of each recent job by staleness (versions behind when applied).",
        labels=["job_id", "staleness"],
    )
    for job_id, digest in digests.items():
        rate.add_metric([job_id], digest.samples_per_second)
        updates.add_metric([job_id, "pushed"], digest.pushed)
        updates.add_metric([job_id, "applied"], digest.applied)
        for bucket, count in zip(STALENESS_BUCKETS, digest.staleness, strict=False):
            staleness.add_metric([job_id, bucket], count)
    yield from (rate, updates, staleness)


def _registry_series(workers: list[WorkerInfo], *, now: float) -> Iterator[Metric]:
    alive = GaugeMetricFamily("taas_workers_alive", "Worker processes with a live registry entry.")
    alive.add_metric([], len(workers))
    age = GaugeMetricFamily(
        "taas_worker_last_heartbeat_seconds",
        "Seconds since each live worker's last registry heartbeat.",
        labels=["worker", "host", "device"],
    )
    for worker in workers:
        age.add_metric([worker.worker_id, worker.host, worker.device], max(0.0, now - worker.last_heartbeat))
    yield from (alive, age)
