"""The API's documentation pages: ``/docs`` (Swagger UI: try every route, with the Authorize
button's key), ``/redoc`` (ReDoc) and ``/``, which leads to ``/docs`` (until a tenant console
takes it). Their scripts and styles are served from the package (``service/api/static``, copied
from npm by ``make docs-assets``), and nothing else is asked for: the pages work offline.

Each page's Content-Security-Policy lets it load from this server alone: ReDoc's sidebar shows
its maker's logo from their CDN, and a browser that obeys the policy never asks for it (the
page hides an image that does not load); a newer release that asks for more gets nothing either.
The inline script that starts Swagger UI is allowed by its hash."""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

from service.api.routing import Router

ASSETS_PATH = "/docs/assets"
ASSETS = Path(__file__).resolve().parents[1] / "static"
TITLE = "taas API"
# Swagger UI sends the document to validator.swagger.io for a badge unless told not to
SWAGGER_UI_PARAMETERS = {"validatorUrl": None, "tryItOutEnabled": True, "displayRequestDuration": True}

router = Router(include_in_schema=False)


def install(app: FastAPI) -> None:
    """Add the pages and their assets to ``app`` (built with ``docs_url=None, redoc_url=None``)."""
    app.include_router(router)
    app.mount(ASSETS_PATH, StaticFiles(directory=ASSETS), name="docs-assets")


@router.get("/")
async def home(request: Request) -> RedirectResponse:
    """The tenant console (which links the API's documentation)."""
    return RedirectResponse(f"{_root(request)}/console", status_code=307)


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    """Swagger UI on ``/openapi.json``."""
    root = _root(request)
    page = get_swagger_ui_html(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=TITLE,
        swagger_js_url=f"{root}{ASSETS_PATH}/swagger-ui-bundle.js",
        swagger_css_url=f"{root}{ASSETS_PATH}/swagger-ui.css",
        swagger_favicon_url=f"{root}{ASSETS_PATH}/favicon-32x32.png",
        swagger_ui_parameters=SWAGGER_UI_PARAMETERS,
    )
    return _local_only(page)


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    """ReDoc on ``/openapi.json`` (without the web fonts it would fetch)."""
    root = _root(request)
    page = get_redoc_html(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=TITLE,
        redoc_js_url=f"{root}{ASSETS_PATH}/redoc.standalone.js",
        redoc_favicon_url=f"{root}{ASSETS_PATH}/favicon-32x32.png",
        with_google_fonts=False,
    )
    return _local_only(page)


def _local_only(page: HTMLResponse) -> HTMLResponse:
    """``page`` with a policy that lets it load scripts, styles, images, fonts and API replies
    from this server alone (styles inline too: both apps set them; ReDoc's search runs in a
    worker made from a blob)."""
    inline = re.findall(rb"<script>(.*?)</script>", bytes(page.body), flags=re.DOTALL)
    hashes = "".join(f" 'sha256-{base64.b64encode(hashlib.sha256(s).digest()).decode()}'" for s in inline)
    page.headers["Content-Security-Policy"] = (
        f"default-src 'none'; script-src 'self'{hashes}; style-src 'self' 'unsafe-inline';"
        " img-src 'self' data:; font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:;"
        " base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
    return page


def _root(request: Request) -> str:
    root: str = request.scope.get("root_path", "")
    return root.rstrip("/")
