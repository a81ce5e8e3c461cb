"""The administrators' dashboard at ``/ops`` and the Prometheus endpoint ``/metrics``.

``install(app)`` mounts the pages (``pages``), their JSON feed (``feed``) and the static files
(the dashboard's script, styles and its own SVG chart code: no CDN, it runs offline).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from service.ops import feed, pages

__all__ = ["install"]

_STATIC = Path(__file__).resolve().parent / "static"


def install(app: FastAPI) -> None:
    """Add /ops (pages, feed, static files) and /metrics to ``app``."""
    app.include_router(pages.router)
    app.include_router(feed.router)
    app.include_router(feed.scrape_router)
    app.mount("/ops/static", StaticFiles(directory=_STATIC), name="ops-static")
