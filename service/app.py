"""The API application: ``create_app(settings)`` (uvicorn runs it with ``--factory``)."""

from __future__ import annotations

import functools
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from fastapi import Depends, FastAPI
from starlette.types import Receive, Scope, Send

from service import ops
from service.api import errors, openapi
from service.api.compression import CompressReplies
from service.api.console import pages as console_pages
from service.api.cross_site import CrossSiteGuard
from service.api.deps import utf8_query
from service.api.fast_classify import FastClassify
from service.api.routes import (
    admin,
    bundles,
    classifiers,
    classify,
    datasets,
    docs,
    evaluations,
    health,
    versions,
    webhooks,
)
from service.api.uploads import BodyLimit
from service.core.db import POOL_CONNECTIONS, make_engine, session_factory
from service.core.settings import Settings, get_settings
from service.ops import observe, state_history
from service.ops.headers import OperatorHeaders
from service.ops.metrics import Metrics, MetricsMiddleware
from service.serving import model_cache
from service.serving.invalidation import Invalidations
from service.serving.lookup_cache import LookupCache
from service.serving.model_cache import ModelCache
from service.storage.store import ArtifactStore
from service.storage.sweeper import LocalSweeper
from service.tenants.failed_keys import FailedKeys
from service.tenants.ratelimit import RateLimiter
from service.training.worker_registry import connect


class TaasAPI(FastAPI):
    """The API: a FastAPI app whose classify calls go to :mod:`service.api.fast_classify` first,
    ahead of the middleware stack (which is where the calls it cannot answer go)."""

    fast_classify: FastClassify

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if FastClassify.takes(scope):
            await self.fast_classify(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the API on ``settings`` (default: the environment's). The lifespan opens the
    database engine, the artifact store and the model cache, and closes the engine at exit."""
    settings = settings or get_settings()
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = make_engine(settings)
        app.state.settings = settings
        app.state.sessions = session_factory(engine)
        app.state.progress_digests = observe.ProgressDigests()  # the dashboard overview's
        app.state.active_history = state_history.ActiveHistory()  # and its chart of the queue
        app.state.db_slots = anyio.Semaphore(POOL_CONNECTIONS)  # see service.api.deps._session
        app.state.store = ArtifactStore.open(settings)
        sweeper = LocalSweeper(
            app.state.store,
            staging_max_age_seconds=settings.temp_max_age_seconds,
            model_copy_max_age_seconds=settings.model_copy_max_age_seconds,
            every_seconds=settings.reconcile_every_seconds,
        )
        sweeper.start()
        app.state.models = ModelCache(
            settings.model_cache_bytes,
            threads=settings.serving_threads,
            fetch=functools.partial(app.state.store.fetch, folder=True),
            top=classify.CLASSES_SHOWN,
        )
        model_cache.use_one_torch_thread()
        app.state.limiter = RateLimiter(settings.redis_url, burst_seconds=settings.classify_burst_seconds)
        app.state.lookups = LookupCache()
        app.state.failed_keys = FailedKeys(
            burst=settings.wrong_key_burst, per_second=settings.wrong_keys_per_second
        )
        app.state.invalidations = Invalidations(settings.redis_url, app.state.lookups)
        app.state.invalidations.start()
        app.state.redis = connect(settings.redis_url) if settings.redis_url else None  # ops, workers
        app.state.metrics = metrics
        app.state.out_of_scope = metrics.out_of_scope  # what classify replies count into
        metrics.watch_platform(app.state.sessions, app.state.redis)
        try:
            yield
        finally:
            metrics.watch_platform(None, None)
            if app.state.redis is not None:
                app.state.redis.close()
            app.state.invalidations.close()
            app.state.limiter.close()
            app.state.models.close()
            sweeper.close()
            engine.dispose()

    app = TaasAPI(
        title="taas",
        summary="Text-classification training as a service, wire-compatible with Watson NLC v1.",
        lifespan=lifespan,
        dependencies=[Depends(utf8_query)],
        docs_url=None,  # service.api.routes.docs serves them, with no CDN
        redoc_url=None,
        generate_unique_id_function=openapi.operation_id,
    )
    errors.install(app)
    openapi.install(app)
    app.fast_classify = FastClassify(app.state, metrics, fallback=super(TaasAPI, app).__call__)
    # NLC create, a new version, a bundle import, a dataset upload.
    upload_paths = re.compile(r"/v1/classifiers(/import|/[^/]+/versions|/[^/]+/evaluate)?|/v1/datasets")
    app.add_middleware(
        BodyLimit,
        upload_bytes=settings.max_upload_bytes,
        json_bytes=settings.max_json_bytes,
        idle_seconds=settings.body_idle_seconds,
        upload_paths=upload_paths,
    )
    app.add_middleware(
        CrossSiteGuard,
        upload_paths=upload_paths,
        trusted_origins=frozenset(o for o in settings.trusted_origins.replace(",", " ").split() if o),
    )
    app.add_middleware(CompressReplies)
    app.add_middleware(OperatorHeaders)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    for module in (classifiers, classify, versions, evaluations, bundles, datasets, webhooks, admin, health):
        app.include_router(module.router)
    docs.install(app)
    console_pages.install(app)
    ops.install(app)
    return app
