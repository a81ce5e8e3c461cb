"""Exception handlers: every error leaves as the NLC body ``{"code", "error", "description"}``."""

from __future__ import annotations

import logging
from functools import partial
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Match

from service.api.cross_site import challenge
from service.core.errors import TaasError, Throttled, Unauthorized, new_incident, unavailable

log = logging.getLogger(__name__)


def nlc_error(
    status: int, description: str, headers: dict[str, str] | None = None, title: str | None = None
) -> JSONResponse:
    """The NLC v1 error response for ``status``. A description that echoes the request may hold
    what UTF-8 cannot encode (a lone surrogate from a JSON escape): it is shown escaped."""
    description = description.encode("utf-8", "backslashreplace").decode("utf-8")
    body = {"code": status, "error": title or HTTPStatus(status).phrase, "description": description}
    return JSONResponse(body, status_code=status, headers=headers)


def install(app: FastAPI) -> None:
    """Register the handlers on ``app``, and document the error responses in its OpenAPI schema."""
    app.openapi = partial(_openapi, app)  # type: ignore[method-assign]
    app.add_exception_handler(TaasError, _taas_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(ValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(ClientDisconnect, _client_left)
    app.add_exception_handler(PoolTimeout, _pool_exhausted)
    app.add_exception_handler(DBAPIError, _database_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _unexpected)


async def _taas_error(request: Request, exc: TaasError) -> JSONResponse:
    headers = None
    if isinstance(exc, Unauthorized):
        headers = {"WWW-Authenticate": challenge(request.app.state.settings.basic_auth_challenge)}
    elif isinstance(exc, Throttled):
        headers = {"Retry-After": str(exc.retry_after)}
    return nlc_error(exc.status, str(exc), headers, exc.title)


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    if isinstance(exc.__cause__, TaasError):
        # FastAPI wraps any error raised while it reads the body (our body limit among them).
        return await _taas_error(request, exc.__cause__)
    if exc.status_code == 400 and isinstance(exc.__cause__, RecursionError):
        return nlc_error(400, "body: JSON nested too deeply")
    if exc.status_code == 400 and isinstance(exc.__cause__, UnicodeDecodeError):
        return nlc_error(400, f"body: not UTF-8 at byte offset {exc.__cause__.start}")
    headers = dict(exc.headers or {})
    if exc.status_code == 404:
        description = f"no route for {request.method} {request.url.path}"
    elif exc.status_code == 405:
        description = f"method {request.method} is not allowed on {request.url.path}"
        headers["Allow"] = ", ".join(_allowed_methods(request))
    else:
        description = str(exc.detail)
    return nlc_error(exc.status_code, description, headers)


_METHODS = ("DELETE", "GET", "HEAD", "PATCH", "POST", "PUT")


def _allowed_methods(request: Request) -> list[str]:
    """Every method that some route takes on the request's path (RFC 9110's ``Allow``; Starlette
    names only the methods of the first route whose path matches)."""
    routes = request.app.router.routes
    return [
        method
        for method in _METHODS
        if any(route.matches({**request.scope, "method": method})[0] is Match.FULL for route in routes)
    ]


async def _validation_error(_request: Request, exc: RequestValidationError | ValidationError) -> JSONResponse:
    # NLC answered 400 for a malformed request; the description names each field and rule.
    problems = []
    for error in exc.errors():
        if error.get("type") == "json_invalid":  # its loc is ("body", character offset)
            reason = error.get("ctx", {}).get("error", "")
            problems.append(f"body: not valid JSON at offset {error['loc'][-1]}: {reason}".rstrip(": "))
            continue
        where = ".".join(str(part) for part in error.get("loc", ()) if part != "body") or "body"
        problems.append(f"{where}: {error.get('msg', 'invalid')}")
    return nlc_error(400, "; ".join(problems) or "invalid request")


async def _client_left(request: Request, _exc: Exception) -> JSONResponse:
    """The client went away mid-body: nobody reads the answer, and it is not the server's error
    (nginx's 499, so that the 5xx count stays the server's own)."""
    log.info("client closed %s %s before sending its whole body", request.method, request.url.path)
    return nlc_error(
        499, "the client closed the connection before its request body ended", title="Client Closed Request"
    )


async def _pool_exhausted(request: Request, _exc: Exception) -> JSONResponse:
    """Every database connection stayed busy past the pool's timeout: overload, so retry later."""
    log.warning("no database connection free for %s %s: answered 503", request.method, request.url.path)
    return nlc_error(503, "the service is overloaded; retry shortly", {"Retry-After": "5"})


async def _database_error(request: Request, exc: DBAPIError) -> JSONResponse:
    """A database with no space left is a 503 naming that (the operator's to fix, and every
    write a 500 before); any other database error is unexpected."""
    if getattr(exc.orig, "sqlstate", None) == "53100" or "database or disk is full" in str(exc.orig):
        return await _taas_error(request, unavailable("the database has no space left", exc.orig or exc))
    return unexpected(request.method, request.url.path, exc)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    return unexpected(request.method, request.url.path, exc)


def unexpected(method: str, path: str, exc: Exception) -> JSONResponse:
    """A 500 for an error nobody expected: logged with a reference the reply names."""
    incident = new_incident()
    log.error("unexpected error %s on %s %s", incident, method, path, exc_info=exc)
    return nlc_error(500, f"unexpected error; reference {incident} in the server log")


_ERROR_SCHEMA = {
    "title": "Error",
    "type": "object",
    "required": ["code", "error", "description"],
    "properties": {
        "code": {"type": "integer"},
        "error": {"type": "string"},
        "description": {"type": "string"},
    },
}
# malformed, no key, wrong key or a quota or another site's page, body over its limit, a body
# in a type or coding the route does not read, too many unknown keys sent
_ALWAYS = (400, 401, 403, 413, 415, 429)
_EXTRA = {  # (method, path) -> statuses beyond those
    ("post", "/v1/classifiers/{classifier_id}/classify"): (409, 503),
    ("get", "/v1/classifiers/{classifier_id}/classify"): (409, 503),
    ("post", "/v1/classifiers/{classifier_id}/classify_collection"): (409, 503),
    ("patch", "/v1/classifiers/{classifier_id}"): (409,),
    ("post", "/v1/classifiers/{classifier_id}/cancel"): (409,),
    ("post", "/v1/classifiers/{classifier_id}/resume"): (409,),
    ("delete", "/v1/datasets/{dataset_id}"): (409,),
    ("post", "/v1/admin/tenants"): (409,),
}


def _openapi(app: FastAPI) -> dict[str, Any]:
    # Document what the handlers above really send: the NLC body, 400 instead of FastAPI's 422,
    # 404 wherever a path names an id, and the route-specific codes.
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
    schema.setdefault("components", {}).setdefault("schemas", {})["Error"] = _ERROR_SCHEMA
    schema["components"]["schemas"].pop("HTTPValidationError", None)
    schema["components"]["schemas"].pop("ValidationError", None)
    error = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            statuses = [*_ALWAYS, *_EXTRA.get((method, path), ())]
            if "{" in path:
                statuses.append(404)
            for status in statuses:
                responses[str(status)] = {"description": HTTPStatus(status).phrase, **error}
            responses["429"]["headers"] = {
                "Retry-After": {"description": "seconds to wait", "schema": {"type": "integer"}}
            }
    app.openapi_schema = schema
    return schema
