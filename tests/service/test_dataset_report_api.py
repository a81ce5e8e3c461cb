"""``GET /v1/datasets/{id}/report`` and the warnings of ``POST /v1/datasets``'s reply."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlalchemy.orm import Session

from service.core.models import Dataset
from tests.service.helpers import store_dataset

pytestmark = pytest.mark.dialect_neutral

SMALL_CLASS = b"text,label\nhot,t\ncold,t\nrain,c\nrain,c\n"


def _upload(client: TestClient, tenant: Any, body: bytes) -> Any:
    return client.post(
        "/v1/datasets?name=d", content=body, headers={**tenant.headers, "content-type": "text/csv"}
    )


def test_the_upload_replies_with_its_warnings_and_stores_the_dataset(client: TestClient, tenant: Any) -> None:
    reply = _upload(client, tenant, SMALL_CLASS)

    assert reply.status_code == 201, reply.text
    assert reply.json()["rows"] == 4
    assert reply.json()["warnings"] == [
        "2 classes with fewer than 5 rows: 'c' (2), 't' (2); such classes are often misclassified",
        "1 row is an exact duplicate (the same text and class)",
    ]
    report = client.get(f"/v1/datasets/{reply.json()['dataset_id']}/report", headers=tenant.headers)
    assert report.status_code == 200
    assert report.json()["warnings"] == reply.json()["warnings"]
    assert report.json()["exact_duplicates"] == {
        "rows": 1,
        "examples": [{"text": "rain", "class_name": "c", "times": 2}],
    }
    assert report.json()["class_counts"] == [{"class_name": "c", "rows": 2}, {"class_name": "t", "rows": 2}]
    assert report.json()["dropped"] == 0


def test_clean_data_uploads_without_warnings(client: TestClient, tenant: Any) -> None:
    rows = "".join(
        f"how warm is it in city {i},temperature\nwill it rain in city {i},rain\n" for i in range(6)
    )

    reply = _upload(client, tenant, b"text,label\n" + rows.encode())

    assert reply.status_code == 201, reply.text
    assert reply.json()["warnings"] == []


def test_another_tenants_report_and_an_unknown_one_are_not_found(
    client: TestClient, tenant_factory: Callable[..., Any]
) -> None:
    owner, intruder = tenant_factory(), tenant_factory()
    dataset_id = store_dataset(client, owner)

    stolen = client.get(f"/v1/datasets/{dataset_id}/report", headers=intruder.headers)
    unknown = client.get("/v1/datasets/0b9f6c1e-5d5e-4a43-9d8e-2f1b7f0c4d21/report", headers=owner.headers)

    assert stolen.status_code == 404 and stolen.json()["error"] == "Not Found"
    assert unknown.status_code == 404
    assert client.get(f"/v1/datasets/{dataset_id}/report", headers=owner.headers).status_code == 200


def test_a_dataset_stored_without_a_report_gets_one_when_first_asked(
    client: TestClient, tenant: Any, session: Session
) -> None:
    dataset_id = _upload(client, tenant, SMALL_CLASS).json()["dataset_id"]
    expected = client.get(f"/v1/datasets/{dataset_id}/report", headers=tenant.headers).json()
    session.execute(update(Dataset).where(Dataset.id == dataset_id).values(report=None))
    session.commit()

    reply = client.get(f"/v1/datasets/{dataset_id}/report", headers=tenant.headers)

    assert reply.status_code == 200
    assert reply.json() == expected
    session.expire_all()
    assert session.get(Dataset, dataset_id).report == expected  # type: ignore[union-attr]


def test_an_nlc_creates_data_is_reported_on_when_asked(
    client: TestClient, tenant: Any, create_classifier: Callable[..., Any], session: Session
) -> None:
    classifier = client.get(
        f"/v1/classifiers/{create_classifier(tenant).json()['classifier_id']}/versions/1",
        headers=tenant.headers,
    ).json()

    reply = client.get(f"/v1/datasets/{classifier['dataset_id']}/report", headers=tenant.headers)

    assert reply.status_code == 200, reply.text
    assert reply.json()["multi_label_texts"]["texts"] == 1  # "Will it snow tomorrow?" has two classes


def test_deleting_the_dataset_deletes_its_report(
    client: TestClient, tenant: Any, nothing_left_behind: Callable[[str], None]
) -> None:
    dataset_id = _upload(client, tenant, SMALL_CLASS).json()["dataset_id"]

    assert client.delete(f"/v1/datasets/{dataset_id}", headers=tenant.headers).status_code == 200

    assert client.get(f"/v1/datasets/{dataset_id}/report", headers=tenant.headers).status_code == 404
    nothing_left_behind(tenant.id)


def test_the_report_is_in_the_openapi_document(client: TestClient) -> None:
    document = client.get("/openapi.json").json()

    answer = document["paths"]["/v1/datasets/{dataset_id}/report"]["get"]["responses"]["200"]
    assert answer["content"]["application/json"]["schema"]["$ref"].endswith("/DatasetReport")
    created = document["paths"]["/v1/datasets"]["post"]["responses"]["201"]
    assert created["content"]["application/json"]["schema"]["$ref"].endswith("/DatasetCreated")
