"""Evaluation as a job through the API: a tenant's test file checked and recorded, scored by the
worker's run (``workers.evaluation_run``, called here as the worker's task calls it), the report
as JSON and as a page; bad files refused with the row, nothing recorded."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.core.models import Evaluation
from service.core.settings import Settings
from service.storage.store import ArtifactStore
from service.training.evaluations import PENDING_PER_CLASSIFIER
from tests.conftest import TenantHandle
from workers.evaluation_run import run_evaluation

pytestmark = pytest.mark.dialect_neutral

TEST_CSV = (
    "text,label\n"
    "how cold is it,temperature\n"
    "what is the temperature now,temperature\n"
    "is it raining today,conditions\n"
    "will it snow,conditions\n"
    "is it sunny,conditions\n"
    "<b>book me a flight</b>,travel\n"  # a class the model never saw: always wrong
)


@pytest.fixture
def evaluate(client: TestClient) -> Callable[..., httpx.Response]:
    """POST a test file to ``cid``'s evaluate as ``tenant`` (a ``test_data`` part)."""

    def post(tenant: TenantHandle, cid: str, body: str | bytes = TEST_CSV, query: str = "") -> httpx.Response:
        files = {"test_data": ("test.csv", body, "text/csv")}
        return client.post(f"/v1/classifiers/{cid}/evaluate{query}", files=files, headers=tenant.headers)

    return post


def _get(client: TestClient, tenant: TenantHandle, url: str) -> dict[str, Any]:
    reply = client.get(url, headers=tenant.headers)
    assert reply.status_code == 200, reply.text
    found: dict[str, Any] = reply.json()
    return found


def test_an_evaluation_is_queued_then_run_and_its_report_kept_as_json_and_as_a_page(
    client: TestClient,
    tenant: TenantHandle,
    available: str,
    evaluate: Callable[..., httpx.Response],
    settings: Settings,
    session: Session,
) -> None:
    reply = evaluate(tenant, available, query="?name=holdout")
    assert reply.status_code == 202, reply.text
    queued = reply.json()
    assert (queued["status"], queued["version"], queued["rows"], queued["done"]) == ("queued", 1, 6, 0)
    assert queued["name"] == "holdout" and queued["report"] is None

    page = client.get(queued["report_html_url"], headers=tenant.headers)
    assert page.status_code == 409 and "queued" in page.json()["description"]

    assert run_evaluation(queued["evaluation_id"], settings) == "completed"
    assert run_evaluation(queued["evaluation_id"], settings) == "not claimable"  # a duplicate message

    done = _get(client, tenant, queued["url"])
    assert (done["status"], done["done"], done["error"]) == ("completed", 6, None)
    report = done["report"]
    assert report["rows"] == report["n"] == 6
    by_class = {row["class_name"]: row for row in report["per_class"]}
    assert set(by_class) == {"conditions", "temperature", "travel"}
    assert by_class["travel"] == {
        "class_name": "travel", "precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1, "predicted": 0
    }  # fmt: skip
    assert report["unknown_classes"] == [{"class_name": "travel", "rows": 1}]
    assert sum(b["rows"] for b in report["calibration"]["bins"]) == 6
    right = sum(report["confusion"]["matrix"][i][i] for i in range(len(report["confusion"]["labels"])))
    assert report["accuracy"] == pytest.approx(right / 6)
    wrong = sum(pair["rows"] for pair in report["confused_pairs"])
    assert wrong == 6 - right  # every wrong row is in a listed pair (fewer than ten pairs here)
    travel = next(p for p in report["confused_pairs"] if p["true_class"] == "travel")
    assert travel["examples"][0]["text"] == "<b>book me a flight</b>"
    # the model's text is the tenant's: on the page it is escaped, never markup
    html = client.get(done["report_html_url"], headers=tenant.headers)
    assert html.status_code == 200 and html.headers["content-type"].startswith("text/html")
    assert "&lt;b&gt;book me a flight&lt;/b&gt;" in html.text and "<b>book" not in html.text
    download = client.get(done["report_html_url"] + "?download=true", headers=tenant.headers)
    assert download.headers["content-disposition"].startswith("attachment;")

    listed = _get(client, tenant, f"/v1/classifiers/{available}/evaluations")
    assert [e["evaluation_id"] for e in listed["evaluations"]] == [queued["evaluation_id"]]
    assert listed["evaluations"][0]["report"] is None  # listings leave the reports out …
    assert listed["evaluations"][0]["accuracy"] == report["accuracy"]  # … but not the headline figures
    assert listed["evaluations"][0]["macro_f1"] == report["macro_f1"]
    row = session.get(Evaluation, queued["evaluation_id"])
    assert row is not None and row.test_rows is None  # the rows went once the report came


def test_every_form_of_training_data_is_read_and_out_of_scope_rows_are_scored_apart(
    client: TestClient,
    tenant: TenantHandle,
    available: str,
    evaluate: Callable[..., httpx.Response],
    settings: Settings,
) -> None:
    nlc = "is it cold outside,temperature\nwill it snow,conditions\nbook a table for two,__out_of_scope__\n"
    jsonl = (
        '{"text": "is it cold outside", "label": "temperature"}\n'
        '{"text": "will it snow", "label": "conditions"}\n'
    )
    raw = client.post(
        f"/v1/classifiers/{available}/evaluate",
        content=b"text,label\nis it cold outside,temperature\n",
        headers={**tenant.headers, "content-type": "text/csv"},
    )
    assert raw.status_code == 202, raw.text
    for body, rows, scored in ((nlc, 3, 2), (jsonl, 2, 2)):
        reply = evaluate(tenant, available, body)
        assert reply.status_code == 202, reply.text
        assert run_evaluation(reply.json()["evaluation_id"], settings) == "completed"
        report = _get(client, tenant, reply.json()["url"])["report"]
        assert (report["rows"], report["n"]) == (rows, scored)
        assert report["unknown_classes"] == []  # __out_of_scope__ rows are not a class the model lacks


def test_a_bad_test_file_is_refused_with_its_row_and_nothing_is_recorded(
    client: TestClient,
    tenant: TenantHandle,
    available: str,
    evaluate: Callable[..., httpx.Response],
    session: Session,
    store: ArtifactStore,
) -> None:
    cases = {
        "text,label\nfine,temperature\n,conditions\n": "row 3",
        "text,label\n": "no rows",
        "only a text\n": "row 1",
    }
    for body, said in cases.items():
        reply = evaluate(tenant, available, body)
        assert reply.status_code == 400, reply.text
        assert "test_data" in reply.json()["description"] and said in reply.json()["description"]
    missing = client.post(
        f"/v1/classifiers/{available}/evaluate", files={"other": ("x", b"y")}, headers=tenant.headers
    )
    assert missing.status_code == 400 and "test_data" in missing.json()["description"]
    assert evaluate(tenant, available, query="?version=7").status_code == 404
    recorded = select(func.count()).select_from(Evaluation).where(Evaluation.classifier_id == available)
    assert session.scalar(recorded) == 0
    assert [p for p in (store.root / "tmp").rglob("*") if p.is_file()] == []  # no spooled file kept


def test_a_classifier_without_an_available_version_or_with_too_many_pending_is_a_409(
    client: TestClient,
    tenant: TenantHandle,
    available: str,
    create_classifier: Callable[..., httpx.Response],
    evaluate: Callable[..., httpx.Response],
) -> None:
    training = create_classifier(tenant).json()["classifier_id"]
    reply = evaluate(tenant, training)
    assert reply.status_code == 409 and "no version" in reply.json()["description"]
    assert evaluate(tenant, training, query="?version=1").status_code == 409  # Training, not Available
    for _ in range(PENDING_PER_CLASSIFIER):
        assert evaluate(tenant, available).status_code == 202
    crowded = evaluate(tenant, available)
    assert crowded.status_code == 409 and "retry when one has ended" in crowded.json()["description"]


def test_deleting_an_evaluation_or_its_classifier_takes_it(
    client: TestClient,
    tenant: TenantHandle,
    available: str,
    evaluate: Callable[..., httpx.Response],
    settings: Settings,
    session: Session,
) -> None:
    first, second = (evaluate(tenant, available).json() for _ in range(2))
    assert client.delete(first["url"], headers=tenant.headers).status_code == 200
    assert client.get(first["url"], headers=tenant.headers).status_code == 404
    assert run_evaluation(first["evaluation_id"], settings) == "not claimable"
    assert client.delete(f"/v1/classifiers/{available}", headers=tenant.headers).status_code == 200
    session.expire_all()
    assert session.get(Evaluation, second["evaluation_id"]) is None


def test_another_tenant_sees_none_of_it(
    client: TestClient,
    tenant: TenantHandle,
    tenant_factory: Callable[..., TenantHandle],
    available: str,
    evaluate: Callable[..., httpx.Response],
) -> None:
    mine = evaluate(tenant, available).json()
    other = tenant_factory()
    assert client.get(mine["url"], headers=other.headers).status_code == 404
    assert client.get(mine["report_html_url"], headers=other.headers).status_code == 404
    assert evaluate(other, available).status_code == 404


def test_a_classifier_keeps_its_newest_finished_evaluations(
    client: TestClient,
    tenant: TenantHandle,
    available: str,
    evaluate: Callable[..., httpx.Response],
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("service.training.evaluations.KEPT_PER_CLASSIFIER", 2)
    made = []
    for _ in range(3):
        queued = evaluate(tenant, available).json()
        made.append(queued["evaluation_id"])
        assert run_evaluation(queued["evaluation_id"], settings) == "completed"
    pending = evaluate(tenant, available).json()["evaluation_id"]  # the fourth: the first two go
    listed = _get(client, tenant, f"/v1/classifiers/{available}/evaluations")["evaluations"]
    assert {e["evaluation_id"] for e in listed} == {made[2], pending}


def test_nlc_rows_that_start_like_json_are_read_as_nlc_rows(
    tenant: TenantHandle, available: str, evaluate: Callable[..., httpx.Response]
) -> None:
    reply = evaluate(tenant, available, "[URGENT] is it cold,temperature\nwill it snow,conditions\n")
    assert reply.status_code == 202, reply.text  # told as the taas commands tell a training file
    assert reply.json()["rows"] == 2
