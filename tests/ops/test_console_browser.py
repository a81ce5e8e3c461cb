"""The tenant console in a real browser (Playwright driving Debian's chromium) against `taas up`:
sign in with the tenant's key, upload → report → train → try → retrain → evaluate both versions
→ compare → roll back → bundle; another tenant sees none of it; CSRF and sign-out hold.

Skipped only where no chromium can be found: ``.ci/run`` and ``make test`` install it.
"""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import Platform

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (dev extras)")

TRAIN_TIMEOUT_MS = 180_000


def _page(browser: playwright.Browser) -> playwright.Page:
    """A page of a fresh browser context (its own cookies), failing on a blocked inline style."""
    page = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True).new_page()
    page.set_default_timeout(30_000)
    page.on(
        "console", lambda message: "Content Security Policy" not in message.text or pytest.fail(message.text)
    )
    return page


def _sign_in(page: playwright.Page, base: str, key: str) -> None:
    page.goto(f"{base}/console")
    assert page.url.endswith("/console/login"), "a page without a session must lead to the sign-in form"
    page.fill("#key", key)
    page.click("button[type=submit]")


def test_a_tenant_uploads_trains_tries_evaluates_compares_rolls_back_and_downloads_in_the_console(
    embedded_platform: Platform,
    intents_nlc: Path,
    browser: playwright.Browser,
    tmp_path: Path,
    artifacts_dir: Path,
) -> None:
    base = embedded_platform.base_url
    key = embedded_platform.create_tenant()
    labelled = tmp_path / "labelled.csv"
    with open(intents_nlc, newline="") as source, open(labelled, "w", newline="") as out:
        csv.writer(out).writerows([["text", "label"], *csv.reader(source)])
    test_file = tmp_path / "holdout.csv"
    test_file.write_text("text,label\nbook a flight to lima,flights\nplay some jazz in lima,music\n")
    page = _page(browser)
    assert httpx.get(f"{base}/", follow_redirects=False).headers["location"] == "/console"

    # the admin key is sent to /ops; the tenant's opens an empty console
    _sign_in(page, base, embedded_platform.admin_key)
    assert "/ops" in page.inner_text(".error")
    _sign_in(page, base, key)
    page.wait_for_selector("#no-classifiers:not([hidden])")

    # upload → the dataset's report → train on it
    page.set_input_files("#upload input[name=file]", str(labelled))
    page.click("#upload button[type=submit]")
    page.wait_for_selector("#report:not([hidden])")
    assert (
        "60" in page.inner_text("#report-facts") and page.input_value("#train input[name=name]") == "labelled"
    )
    page.screenshot(path=str(artifacts_dir / "console-upload.png"), full_page=True)
    page.click("#train button[type=submit]")
    page.wait_for_url("**/console/classifiers/*")
    classifier_id = page.url.rsplit("/", 1)[-1]
    page.wait_for_selector("#versions tbody tr:has-text('Available')", timeout=TRAIN_TIMEOUT_MS)
    page.wait_for_selector("#loss-chart svg path.series")  # the training curve, with titled axes
    assert "training loss" in page.inner_text("#loss-chart")

    # try a text
    page.fill("#try input[name=text]", "book a flight to rome")
    page.click("#try button[type=submit]")
    page.wait_for_selector("#answer:not([hidden])")
    assert page.inner_text("#answer tbody tr:first-child td:first-child") == "flights"

    # a second version on the same dataset, which serves once Available
    page.click("#retrain button[type=submit]")
    page.wait_for_selector("#versions tbody tr:has-text('v2 (serving)')", timeout=TRAIN_TIMEOUT_MS)

    # evaluate every Available version on one test file: side by side, each linked to its report
    page.select_option("#evaluate select[name=version]", "all")
    page.set_input_files("#evaluate input[name=file]", str(test_file))
    page.click("#evaluate button[type=submit]")
    for column in (2, 3):  # a link once completed (the page's CSP allows no script eval to poll with)
        page.wait_for_selector(f"#comparison tbody tr:first-child td:nth-child({column}) a", timeout=60_000)
    assert page.inner_text("#comparison thead").split() == ["Test", "file", "v1", "v2"]
    assert page.inner_text("#comparison tbody tr td:first-child") == "holdout.csv"
    report_url = page.get_attribute("#comparison tbody tr td:nth-child(2) a", "href")
    assert report_url is not None
    report = page.context.request.get(report_url)  # the session's cookie reads /v1 too
    assert report.ok and "holdout.csv" in report.text()
    page.screenshot(path=str(artifacts_dir / "console-classifier.png"), full_page=True)

    # roll back to version 1
    page.click("#versions tbody tr:has-text('v1') button:text('Roll back to it')")
    page.wait_for_selector("#versions tbody tr:has-text('v1 (serving)')")

    # download version 1's bundle
    with page.expect_download() as download:
        page.click("#versions tbody tr:has-text('v1') a:text('Bundle')")
    bundle = tmp_path / "v1.taas"
    download.value.save_as(bundle)
    assert gzip.open(bundle).read(1)  # a gzip'd tar

    # back on the classifiers page: the classifier listed, and a stored dataset's report at a click
    page.goto(f"{base}/console")
    page.wait_for_selector("#classifiers tbody tr:has-text('labelled'):has-text('Available')")
    page.click("#datasets tbody tr:has-text('labelled') button")
    page.wait_for_selector("#report:not([hidden])")
    assert page.inner_text("#report-title") == "Dataset “labelled”"

    # a state-changing call without the CSRF token is refused, with it allowed
    classify = f"{base}/v1/classifiers/{classifier_id}/classify"
    assert page.context.request.post(classify, data={"text": "hi"}).status == 403
    token = page.get_attribute("meta[name=csrf-token]", "content") or ""
    assert page.context.request.post(classify, data={"text": "hi"}, headers={"X-CSRF-Token": token}).ok

    # another tenant sees none of it
    other = _page(browser)
    _sign_in(other, base, embedded_platform.create_tenant())
    other.wait_for_selector("#no-classifiers:not([hidden])")
    other.goto(f"{base}/console/classifiers/{classifier_id}")
    other.wait_for_selector("#notice:not([hidden])")
    assert "not found" in other.inner_text("#notice")

    # signing out ends the session on the server: its cookie opens nothing any more
    cookies = page.context.cookies()
    page.click("header button[type=submit]")
    page.wait_for_url("**/console/login")
    copied = "; ".join(f"{c['name']}={c['value']}" for c in cookies)
    assert httpx.get(f"{base}/v1/classifiers", headers={"Cookie": copied}).status_code == 401
