"""Exception handlers: every error leaves as the NLC body ``{"code", "error", "description"}``."""

from __future__ import annotations

import logging
import uuid
from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.errors import TaasError, Unauthorized

log = logging.getLogger(__name__)
WWW_AUTHENTICATE = 'Basic realm="taas", Bearer realm="taas"'


def nlc_error(status: int, description: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The NLC v1 error response for ``status``."""
    body = {"code": status, "error": HTTPStatus(status).phrase, "description": description}
    return JSONResponse(body, status_code=status, headers=headers)


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``."""
    app.add_exception_handler(TaasError, _taas_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(ValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _unexpected)


async def _taas_error(_request: Request, exc: TaasError) -> JSONResponse:
    headers = {"WWW-Authenticate": WWW_AUTHENTICATE} if isinstance(exc, Unauthorized) else None
    body = {"code": exc.status, "error": exc.title, "description": str(exc)}
    return JSONResponse(body, status_code=exc.status, headers=headers)


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    if exc.status_code == 404:
        description = f"no route for {request.method} {request.url.path}"
    elif exc.status_code == 405:
        description = f"method {request.method} is not allowed on {request.url.path}"
    else:
        description = str(exc.detail)
    return nlc_error(exc.status_code, description, dict(exc.headers or {}))


async def _validation_error(_request: Request, exc: RequestValidationError | ValidationError) -> JSONResponse:
    # NLC answered 400 for a malformed request; the description names each field and rule.
    problems = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error.get("loc", ()) if part != "body") or "body"
        problems.append(f"{where}: {error.get('msg', 'invalid')}")
    return nlc_error(400, "; ".join(problems) or "invalid request")


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    incident = uuid.uuid4().hex[:12]
    log.error("unexpected error %s on %s %s", incident, request.method, request.url.path, exc_info=exc)
    return nlc_error(500, f"unexpected error; reference {incident} in the server log")
