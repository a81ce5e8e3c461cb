"""Probes for orchestrators and load balancers, with no key: ``/healthz`` (the process answers)
and ``/readyz`` (and so do the database, Redis and the artifact store)."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse

from service.api import readiness
from service.api.routing import Router
from service.api.schemas import Health, Readiness

router = Router(tags=["health"])


@router.get("/healthz", response_model=Health)
async def healthz() -> Health:
    """Liveness: 200 while the process answers; it asks nothing else."""
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "A dependency does not answer."}},
)
async def readyz(request: Request) -> JSONResponse:
    """Readiness: 200 when the database, Redis and the artifact store each answer within 2 s,
    else 503 naming which do not (the server log says why)."""
    checks = await readiness.check(request.app.state)
    ready = all(checks.values())
    reply = Readiness(status="ready" if ready else "unready", checks=checks)
    return JSONResponse(reply.model_dump(), status_code=200 if ready else 503)
