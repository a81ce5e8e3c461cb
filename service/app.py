"""The API application: ``create_app(settings)`` (uvicorn runs it with ``--factory``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from service.api import errors
from service.api.routes import admin, classifiers, classify, datasets
from service.db import make_engine, session_factory
from service.serving import ModelCache
from service.settings import Settings, get_settings
from service.store import ArtifactStore


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the API on ``settings`` (default: the environment's). The lifespan opens the
    database engine, the artifact store and the model cache, and closes the engine at exit."""
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = make_engine(settings)
        app.state.settings = settings
        app.state.sessions = session_factory(engine)
        app.state.store = ArtifactStore(settings.resolved_artifacts_dir())
        app.state.models = ModelCache(settings.model_cache_bytes)
        try:
            yield
        finally:
            engine.dispose()

    app = FastAPI(
        title="taas",
        summary="Text-classification training as a service, wire-compatible with Watson NLC v1.",
        lifespan=lifespan,
    )
    errors.install(app)
    for module in (classifiers, classify, datasets, admin):
        app.include_router(module.router)
    return app
