"""/docs and /redoc in a real browser (Playwright driving Debian's chromium): they render, and
Swagger UI's Authorize button takes a key that "Try it out" then sends, with no request leaving
the machine (every request to a host other than the server's fails the test: the page would
be blank offline).

Skipped only where no chromium can be found: ``.ci/run`` and ``make test`` install it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from service.app import create_app
from service.core.settings import Settings
from tests.conftest import ADMIN_KEY, REDIS_TEST_URL, migrated_database
from tests.service.helpers import serving_in_thread

pytestmark = [pytest.mark.slow]
playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (dev extras)")


@pytest.fixture
def api(tmp_path: Path) -> Iterator[str]:
    """The API on a socket (SQLite: the pages do not depend on the database); its URL."""
    with migrated_database("sqlite", tmp_path) as url:
        settings = Settings(
            _env_file=None,
            data_dir=tmp_path / "var",
            database_url=url,
            redis_url=REDIS_TEST_URL,
            admin_key=ADMIN_KEY,
        )
        with serving_in_thread(create_app(settings)) as port:
            yield f"http://127.0.0.1:{port}"


@pytest.fixture
def offline_page(browser: playwright.Browser) -> tuple[playwright.Page, list[str]]:
    """A page whose every request to another host than 127.0.0.1 is refused and noted."""
    elsewhere: list[str] = []

    def only_local(route: playwright.Route) -> None:
        url = route.request.url
        if url.startswith(("data:", "blob:")) or urlsplit(url).hostname == "127.0.0.1":
            route.continue_()
        else:
            elsewhere.append(url)
            route.abort()

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(30_000)
    page.route("**/*", only_local)
    return page, elsewhere


def test_docs_render_and_try_a_route_with_the_key_with_no_request_leaving_the_machine(
    api: str, offline_page: tuple[playwright.Page, list[str]]
) -> None:
    page, elsewhere = offline_page
    made = httpx.post(f"{api}/v1/admin/tenants", json={"name": "docs"}, headers={"X-API-Key": ADMIN_KEY})
    key = made.raise_for_status().json()["api_key"]
    # / leads to the tenant console (its sign-in form); Swagger UI lists the operations
    page.goto(api)
    assert page.url == f"{api}/console/login"
    page.goto(f"{api}/docs")
    page.wait_for_selector("#operations-classifiers-create_classifier")
    # Authorize takes a key in each of the three forms; give it the Bearer one
    page.click("button.authorize")
    dialog = page.locator(".modal-ux")
    for scheme in ("basicAuth", "bearerAuth", "apiKeyHeader"):
        assert dialog.get_by_text(scheme, exact=False).count() > 0, scheme
    bearer = dialog.locator(".auth-container", has_text="bearerAuth")
    bearer.locator("input").fill(key)
    bearer.locator("button", has_text="Authorize").click()
    dialog.locator("button.btn-done", has_text="Close").first.click()
    # "Try it out" on GET /v1/classifiers sends it: 200, an empty list
    listing = page.locator("#operations-classifiers-list_classifiers")
    listing.locator(".opblock-summary").click()
    listing.get_by_role("button", name="Execute").click()
    answered = listing.locator(".live-responses-table .response .response-col_status")
    answered.wait_for()
    status = answered.first.inner_text()
    assert status.strip() == "200"
    # the create form has NLC's parts
    create = page.locator("#operations-classifiers-create_classifier")
    create.locator(".opblock-summary").click()
    assert create.get_by_text("training_metadata").count() > 0
    # ReDoc renders the same document
    page.goto(f"{api}/redoc")
    page.wait_for_selector("text=Text-classification training as a service")

    assert elsewhere == [], f"requests left the machine: {elsewhere}"
