"""The dashboard in a real browser (Playwright driving Debian's chromium) against `taas up`.

Skipped only where no chromium can be found: ``.ci/run`` and ``make test`` install it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import Platform

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (dev extras)")

TRAIN_TIMEOUT_MS = 180_000


@pytest.fixture
def page(browser: playwright.Browser) -> playwright.Page:
    opened = browser.new_page(viewport={"width": 1280, "height": 900})
    opened.set_default_timeout(30_000)
    return opened


def _log_in(page: playwright.Page, base: str, key: str) -> None:
    page.goto(f"{base}/ops")
    assert page.url.endswith("/ops/login"), "a page without a session must lead to the login form"
    page.fill("#key", key)
    page.click("button[type=submit]")


@pytest.fixture
def slow_training_platform(platform_factory: Callable[..., Platform]) -> Platform:
    """`taas up` whose small jobs also train their cross-fitting fold models, so that a job
    trains for several of the dashboard's 2 s polls even on a fast machine."""
    platform = platform_factory(cross_fit=True)
    platform.start()
    return platform


def test_a_tenant_key_is_refused_and_the_admin_watches_a_job_train_live_to_drawn_charts(
    slow_training_platform: Platform, intents_nlc: Path, page: playwright.Page, artifacts_dir: Path
) -> None:
    base = slow_training_platform.base_url
    tenant_key = slow_training_platform.create_tenant()
    blocked: list[str] = []  # an inline style set as an attribute was blocked: every bar drew full
    page.on(
        "console", lambda message: "Content Security Policy" in message.text and blocked.append(message.text)
    )
    # a tenant key opens nothing
    _log_in(page, base, tenant_key)
    assert page.url.endswith("/ops/login") and "not the administrator key" in page.inner_text(".error")
    assert (
        httpx.get(f"{base}/ops/api/overview", headers={"Authorization": f"Bearer {tenant_key}"}).status_code
        == 401
    )
    # the admin key opens the overview, which lists the platform's worker, idle
    _log_in(page, base, slow_training_platform.admin_key)
    page.wait_for_selector("#tiles .tile")
    page.wait_for_selector("#workers span.muted:text-is('idle')")
    # when: the tenant starts a training while the overview is open
    with slow_training_platform.client(tenant_key) as tenant, open(intents_nlc, "rb") as data:
        metadata = json.dumps({"name": "browser-intents", "language": "en"})
        created = tenant.post(
            "/v1/classifiers",
            files={"training_data": ("t.csv", data, "text/csv"), "training_metadata": (None, metadata)},
        )
    assert created.status_code == 200, created.text
    # then: it shows up among the running jobs without a reload, its bar as full as its percentage
    page.wait_for_selector("#running a:text('browser-intents')", timeout=60_000)
    # and the last hour's jobs queued and training are drawn, one line each
    assert page.locator("#active-history svg path.series").count() == 2
    page.screenshot(path=str(artifacts_dir / "ops-overview.png"), full_page=True)
    filled, whole, label = page.evaluate(
        """() => {
            const progress = document.querySelector("#running .progress");
            const bar = progress.querySelector(".bar");
            return [bar.firstChild.getBoundingClientRect().width, bar.getBoundingClientRect().width,
                    progress.textContent];
        }"""
    )
    assert abs(100 * filled / whole - int(label.split("%")[0])) <= 2, (filled, whole, label)
    # and its page follows it to Available
    page.click("#running a:text('browser-intents')", timeout=60_000)
    page.wait_for_selector("#facts dd:text('Available')", timeout=TRAIN_TIMEOUT_MS)
    page.wait_for_selector("#confusion svg rect.cell")
    for chart in ("#loss-chart", "#rate-chart"):
        path = page.locator(f"{chart} svg path.series").first
        assert len(path.get_attribute("d") or "") > 10, f"{chart} drew no line"
    assert page.locator("#staleness-chart svg rect.column").count() == 7
    _assert_charts_can_be_read(page)
    _assert_the_per_class_table_starts_at_the_worst(page)
    page.screenshot(path=str(artifacts_dir / "ops-job-detail.png"), full_page=True)  # the loss read out
    out_of_scope = page.locator("#metrics dt:text-is('Out of scope') + dd").inner_text()
    assert out_of_scope == "in_scope_score below 0.020 (about 2.0 % of in-scope texts)", out_of_scope
    waited = page.locator("#ps dt:text-is('Waited at the staleness bound s') + dd").inner_text()
    assert waited == "0.00", waited  # no bound by default: nobody waits
    assert page.locator("#events span.event.done").count() == 1
    assert not blocked, f"the dashboard's own CSP blocked: {blocked}"
    # and the platform's /metrics carry the real training's series
    _assert_training_metrics(base, job_id=page.url.rsplit("/", 1)[-1])
    # and the jobs page lists it, filtered by its tenant (the filter's choices come once)
    page.goto(f"{base}/ops/jobs")
    page.wait_for_selector("#filters select[name=tenant] option:nth-child(2)", state="attached")
    page.select_option("#filters select[name=tenant]", index=1)
    page.click("#filters button[type=submit]")
    page.wait_for_selector("#pageinfo:text('page 1 of 1 · 1 jobs')")
    assert page.locator("#jobs a:text('browser-intents')").count() == 1
    # and the operator deletes the tenant on the tenants page, typing its name to confirm
    page.goto(f"{base}/ops/tenants")
    page.wait_for_selector("#pageinfo:text('page 1 of 1 · 1 tenants')")
    assert page.inner_text("#live").startswith("as of ")  # it does not poll: not "live"
    name = page.inner_text("#tenants section.card h2")
    page.once("dialog", lambda dialog: dialog.accept(name + "x"))  # mistyped: said so, nothing deleted
    page.click("#tenants button:text('Delete tenant')")
    page.wait_for_selector("#issued:has-text('nothing was deleted')")
    page.fill("#filters input[name=name]", "no such tenant")
    page.click("#filters button[type=submit]")
    page.wait_for_selector("#tenants p:text('No tenant matches.')")
    page.fill("#filters input[name=name]", name.upper())
    page.click("#filters button[type=submit]")
    page.wait_for_selector(f"#tenants section.card h2:text-is('{name}')")
    page.once("dialog", lambda dialog: dialog.accept(name))
    page.click("#tenants button:text('Delete tenant')")
    page.wait_for_selector(f"#issued:text('Deleted {name}: 1 classifiers, 1 datasets')")
    assert httpx.get(f"{base}/v1/classifiers", headers={"X-API-Key": tenant_key}).status_code == 401


def _assert_charts_can_be_read(page: playwright.Page) -> None:
    """Titled axes, a read-out under the pointer, time ticks on round values of the clock."""
    titles = {
        chart: page.locator(f"{chart} svg text.axis-title").all_text_contents()
        for chart in ("#loss-chart", "#rate-chart", "#staleness-chart", "#confusion")
    }
    assert titles == {
        "#loss-chart": ["step", "training loss"],
        "#rate-chart": ["time", "samples/s"],
        "#staleness-chart": ["versions behind when applied", "updates"],
        "#confusion": ["Predicted class", "True class"],
    }, titles
    assert page.locator("#loss-chart svg g.hover").get_attribute("visibility") == "hidden"
    page.hover("#loss-chart svg rect.hover-area", position={"x": 5, "y": 20})
    assert page.locator("#loss-chart svg g.hover").get_attribute("visibility") == "visible"
    first_step = page.locator("#loss-chart svg text.x-tick").first.get_attribute("data-value")
    readout = page.locator("#loss-chart svg text.readout").text_content() or ""
    step, loss = readout.split(" · loss ")  # the step nearest the chart's left edge, and its loss
    assert float(step.replace("k", "e3")) <= float(first_step or "inf") + 50 and float(loss) > 0, readout
    # the page redraws its charts at each poll (2 s): the read-out stays under a still pointer
    page.evaluate("() => { document.querySelector('#loss-chart svg').dataset.old = 'yes'; }")
    page.wait_for_selector("#loss-chart svg:not([data-old])", timeout=10_000)
    assert page.locator("#loss-chart svg g.hover").get_attribute("visibility") == "visible"
    # the rate chart's x axis is the clock: ticks a whole step apart, each on a multiple of it
    ticks = [
        float(v or "nan")
        for v in page.locator("#rate-chart svg text.x-tick").evaluate_all(
            "ts => ts.map(t => t.getAttribute('data-value'))"
        )
    ]
    offset = page.evaluate("() => new Date().getTimezoneOffset() * 60")
    steps = {b - a for a, b in pairwise(ticks)}
    assert len(steps) <= 1 and all((t - offset) % min(steps or {1}) == 0 for t in ticks), ticks


def _assert_the_per_class_table_starts_at_the_worst(page: playwright.Page) -> None:
    cells = page.locator("#per-class tbody tr td")
    classes = page.locator("#per-class tbody tr td:first-child").all_inner_texts()
    f1 = [float(v) for v in page.locator("#per-class tbody tr td:nth-child(4)").all_inner_texts()]
    assert sorted(classes) == ["flights", "music", "weather"] and f1 == sorted(f1), (classes, f1)
    assert cells.count() == 3 * 5 and not page.locator("#per-class-all").is_visible()  # all 3 shown


def _assert_training_metrics(base: str, *, job_id: str) -> None:
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(f"{base}/metrics").text):
        for sample in family.samples:
            if sample.labels.get("job_id") in (None, job_id):
                values[sample.name] = values.get(sample.name, 0.0) + sample.value
    for name in (
        "taas_http_requests_total",
        "taas_http_request_duration_seconds_count",
        "taas_jobs",
        "taas_training_samples_per_second",
        "taas_ps_updates_total",
        "taas_ps_staleness_updates_total",
        "taas_worker_last_heartbeat_timestamp_seconds",
        "taas_workers_alive",
    ):
        assert values.get(name, 0) > 0, f"{name} is missing or zero"
