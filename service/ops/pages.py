"""The dashboard's HTML pages and its login and logout.

A page is a shell (layout, navigation, the CSRF token); ``static/ops.js`` fills it from the
JSON feed and keeps it current. Without a session every page redirects to the login form; when
the session store (Redis) is down, every page is that form, saying so (503).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from service.api.deps import SettingsDep
from service.api.routing import Router
from service.core.errors import TooManyWrongKeys
from service.ops import session as ops_session
from service.tenants.accounts import is_admin_key
from service.tenants.failed_keys import FailedKeys

router = Router(prefix="/ops", include_in_schema=False)
templates = Jinja2Templates(directory=Path(__file__).resolve().parent / "templates")


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request) -> Response:
    try:
        ops_session.check_store(request)
    except ops_session.SessionStoreDown as down:
        return _store_down(request, down)
    return templates.TemplateResponse(request, "login.html", {"error": None})


@router.post("/login", response_class=HTMLResponse)
def login(request: Request, settings: SettingsDep, key: str = Form("")) -> Response:
    """Open a session for the admin key; any other key (a tenant's included) is refused, and an
    address that sent too many wrong keys is held up before its key is looked at."""
    failed_keys: FailedKeys = request.app.state.failed_keys
    try:
        failed_keys.check(request)
    except TooManyWrongKeys as held:
        error = f"Too many wrong keys from this address; try again in {held.retry_after} s."
        return templates.TemplateResponse(
            request,
            "login.html",
            {"error": error},
            status_code=held.status,
            headers={"Retry-After": str(held.retry_after)},
        )
    if not is_admin_key(settings, key.strip()):
        failed_keys.failed(request)
        error = "That is not the administrator key."
        return templates.TemplateResponse(request, "login.html", {"error": error}, status_code=401)
    response = RedirectResponse("/ops", status_code=303)
    try:
        ops_session.start(response, request, settings)
    except ops_session.SessionStoreDown as down:
        return _store_down(request, down)
    return response


@router.post("/logout")
def logout(request: Request, csrf: str = Form("")) -> Response:
    """End the session on the server (a copy of the cookie is refused from now on) and here.

    Without a cookie nothing is ended: another site's form brings none (``SameSite=Strict``),
    and deleting the cookie on its say-so logged the operator out here while the session
    stayed live on the server."""
    try:
        found = ops_session.current(request)
        if found is not None:
            ops_session.check_csrf(found, csrf)
            ops_session.revoke(request, found)
    except ops_session.SessionStoreDown as down:
        return _store_down(request, down)
    response = RedirectResponse("/ops/login", status_code=303)
    if ops_session.COOKIE in request.cookies:
        ops_session.end(response)
    return response


@router.get("", response_class=HTMLResponse)
def overview_page(request: Request) -> Response:
    return _render(request, "overview", {})


@router.get("/jobs", response_class=HTMLResponse)
def jobs_page(request: Request) -> Response:
    return _render(request, "jobs", {})


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(request: Request, job_id: str) -> Response:
    return _render(request, "job", {"job_id": job_id})


@router.get("/tenants", response_class=HTMLResponse)
def tenants_page(request: Request) -> Response:
    return _render(request, "tenants", {})


def _render(request: Request, page: str, context: dict[str, object]) -> Response:
    try:
        found = ops_session.current(request)
    except ops_session.SessionStoreDown as down:
        return _store_down(request, down)
    if found is None:
        return RedirectResponse("/ops/login", status_code=303)
    headers = {"Cache-Control": "no-store"}
    context = {"page": page, "csrf": found.csrf, **context}
    return templates.TemplateResponse(request, f"{page}.html", context, headers=headers)


def _store_down(request: Request, down: ops_session.SessionStoreDown) -> Response:
    return templates.TemplateResponse(request, "login.html", {"error": str(down)}, status_code=down.status)
