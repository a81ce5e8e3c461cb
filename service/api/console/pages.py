"""The console's pages, its sign-in and its sign-out.

A page is a shell (layout, the tenant's name, the CSRF token); ``static/console.js`` fills it
from the ``/v1`` API. Without a session a page leads to the sign-in form; when the session
store (Redis) is down, every page is that form, saying so (503).
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from service.api.console import session as console_session
from service.api.deps import SessionDep, SettingsDep
from service.api.routing import Router
from service.core.errors import TooManyWrongKeys
from service.tenants.accounts import hash_key, is_admin_key, tenant_for_key, tenant_for_key_hash
from service.tenants.failed_keys import FailedKeys

router = Router(prefix="/console", include_in_schema=False)
_HERE = Path(__file__).resolve().parent
templates = Jinja2Templates(directory=_HERE / "templates")


def install(app: FastAPI) -> None:
    """Add the console's pages and static files to ``app``."""
    app.include_router(router)
    app.mount("/console/static", StaticFiles(directory=_HERE / "static"), name="console-static")


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request) -> Response:
    try:
        console_session.check_store(request)
    except console_session.SessionStoreDown as down:
        return _form(request, str(down), down.status)
    return _form(request, None, 200)


@router.post("/login", response_class=HTMLResponse)
def login(request: Request, session: SessionDep, settings: SettingsDep, key: str = Form("")) -> Response:
    """Open a session for a tenant's API key; the admin key is sent to /ops, and an address that
    sent too many wrong keys is held up before its key is looked at."""
    failed_keys: FailedKeys = request.app.state.failed_keys
    try:
        failed_keys.check(request)
    except TooManyWrongKeys as held:
        error = f"Too many wrong keys from this address; try again in {held.retry_after} s."
        return _form(request, error, held.status, {"Retry-After": str(held.retry_after)})
    key = key.strip()
    if is_admin_key(settings, key):
        return _form(request, "That is the administrator key: the operator's dashboard is at /ops.", 401)
    tenant = tenant_for_key(session, key) if key else None
    if tenant is None:
        failed_keys.failed(request)
        return _form(request, "That key is unknown or revoked.", 401)
    response = RedirectResponse("/console", status_code=303)
    try:
        console_session.start(response, request, hash_key(key))
    except console_session.SessionStoreDown as down:
        return _form(request, str(down), down.status)
    return response


@router.post("/logout")
def logout(request: Request, csrf: str = Form("")) -> Response:
    """End the session on the server (a copy of the cookie is refused from now on) and here;
    without the session's CSRF token nothing is ended (another site's form)."""
    try:
        found = console_session.current(request)
        if found is not None:
            console_session.check_csrf(found, csrf)
            console_session.revoke(request, found)
    except console_session.SessionStoreDown as down:
        return _form(request, str(down), down.status)
    response = RedirectResponse("/console/login", status_code=303)
    if console_session.COOKIE in request.cookies:  # another site's form brings none: nothing to end
        console_session.end(response)
    return response


@router.get("", response_class=HTMLResponse)
def home_page(request: Request, session: SessionDep) -> Response:
    return _render(request, session, "home", {})


@router.get("/classifiers/{classifier_id}", response_class=HTMLResponse)
def classifier_page(request: Request, session: SessionDep, classifier_id: str) -> Response:
    return _render(request, session, "classifier", {"classifier_id": classifier_id})


def _render(request: Request, db: SessionDep, page: str, context: dict[str, object]) -> Response:
    try:
        found = console_session.current(request)
    except console_session.SessionStoreDown as down:
        return _form(request, str(down), down.status)
    tenant = tenant_for_key_hash(db, found.key_hash) if found is not None else None
    if found is None or tenant is None:
        return RedirectResponse("/console/login", status_code=303)
    context = {"page": page, "csrf": found.csrf, "tenant": tenant.name, **context}
    return templates.TemplateResponse(request, f"{page}.html", context, headers={"Cache-Control": "no-store"})


def _form(
    request: Request, error: str | None, status: int, headers: dict[str, str] | None = None
) -> Response:
    return templates.TemplateResponse(
        request, "login.html", {"error": error}, status_code=status, headers=headers
    )
