"""A tenant changes a classifier's out-of-scope rate without retraining (``PATCH
/v1/classifiers/{id}``): the classifier shows it, every classify answers by it at once (the
route, the fast path, a pinned version, another replica's warm cache), and ``null`` puts back
the model's own."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.app import create_app
from service.core.settings import Settings
from trainer.inference import LoadedModel

pytestmark = pytest.mark.dialect_neutral

TEXTS = ["is it cold outside today", "will it rain", "book me a flight to Lisbon", "xqzv plomk"]
HIGH = 0.99  # nearly every text scores below it: nearly every text is out of scope


def _rate(client: TestClient, tenant: Any, cid: str, rate: object) -> httpx.Response:
    return client.patch(f"/v1/classifiers/{cid}", json={"out_of_scope_rate": rate}, headers=tenant.headers)


def _answers(client: TestClient, tenant: Any, cid: str, query: str = "") -> list[dict[str, Any]]:
    reply = client.post(
        f"/v1/classifiers/{cid}/classify_collection{query}",
        json={"collection": [{"text": t} for t in TEXTS]},
        headers=tenant.headers,
    )
    assert reply.status_code == 200, reply.text
    found: list[dict[str, Any]] = reply.json()["collection"]
    return found


def _decided_by(answers: list[dict[str, Any]], rate: float) -> bool:
    return [a["out_of_scope"] for a in answers] == [a["in_scope_score"] < rate for a in answers]


@pytest.fixture
def model_rate(tiny_model: Path) -> float:
    """The out-of-scope rate the model was trained with."""
    scoring = LoadedModel.load(tiny_model).in_scope
    assert scoring is not None
    return scoring.rate


def test_a_patched_rate_shows_and_decides_until_null_puts_back_the_models_own(
    client: TestClient, tenant: Any, available: str, model_rate: float
) -> None:
    assert (
        client.get(f"/v1/classifiers/{available}", headers=tenant.headers).json()["out_of_scope_rate"] is None
    )
    before = _answers(client, tenant, available)

    changed = _rate(client, tenant, available, HIGH)
    shown = client.get(f"/v1/classifiers/{available}", headers=tenant.headers).json()
    after = _answers(client, tenant, available)
    pinned = _answers(client, tenant, available, "?version=1")
    reset = _rate(client, tenant, available, None)
    again = _answers(client, tenant, available)

    assert changed.status_code == 200, changed.text
    assert changed.json()["out_of_scope_rate"] == HIGH and shown["out_of_scope_rate"] == HIGH
    assert _decided_by(before, model_rate) and _decided_by(again, model_rate)
    assert _decided_by(after, HIGH) and _decided_by(pinned, HIGH)
    assert sum(a["out_of_scope"] for a in after) >= 3 > sum(a["out_of_scope"] for a in before)
    assert [a["in_scope_score"] for a in after] == [a["in_scope_score"] for a in before]  # no retraining
    assert reset.status_code == 200 and reset.json()["out_of_scope_rate"] is None


def test_a_warm_lookup_cache_and_the_fast_path_answer_by_the_new_rate_at_once(
    client: TestClient,
    app: FastAPI,
    tenant: Any,
    available: str,
    model_rate: float,
    wait_until: Callable[..., Any],
) -> None:
    lookups = app.state.lookups
    wait_until(lookups.usable, message="the invalidation listener subscribed")

    def classify() -> dict[str, Any]:
        reply = client.post(
            f"/v1/classifiers/{available}/classify", json={"text": TEXTS[-1]}, headers=tenant.headers
        )
        assert reply.status_code == 200, reply.text
        answer: dict[str, Any] = reply.json()
        return answer

    def cached() -> dict[str, Any] | None:  # once cached, the next call is the fast path's
        answer = classify()
        return answer if len(lookups) == 1 else None

    warm = wait_until(cached, message="a classify filled the lookup cache")
    _rate(client, tenant, available, HIGH).raise_for_status()
    first = classify()  # right after the PATCH
    from_memory = wait_until(cached, message="the lookup cache filled again")
    fast = classify()

    assert _decided_by([warm], model_rate)
    assert _decided_by([first], HIGH) and _decided_by([from_memory], HIGH) and _decided_by([fast], HIGH)
    assert fast["out_of_scope"] and not warm["out_of_scope"]


@pytest.fixture
def replica(settings: Settings) -> Iterator[TestClient]:
    """A second API process on the same database and Redis."""
    with TestClient(create_app(settings)) as second:
        yield second


def test_a_rate_patched_on_one_replica_reaches_the_others_warm_cache(
    client: TestClient, replica: TestClient, tenant: Any, available: str, wait_until: Callable[..., Any]
) -> None:
    lookups = replica.app.state.lookups  # type: ignore[attr-defined]
    wait_until(lookups.usable, message="the replica's listener subscribed")
    wait_until(lambda: _answers(replica, tenant, available) and len(lookups) == 1, message="cached")

    _rate(client, tenant, available, HIGH).raise_for_status()

    wait_until(lambda: len(lookups) == 0, timeout=2, message="the replica heard of the change")
    assert _decided_by(_answers(replica, tenant, available), HIGH)


@pytest.mark.parametrize("rate", [0, 1, 0.0, 1.0, -0.1, 1.5, "0.05", True, [0.05], {"rate": 0.05}])
def test_a_rate_that_is_not_a_number_strictly_between_0_and_1_is_a_400_naming_the_field(
    client: TestClient, tenant: Any, available: str, rate: object
) -> None:
    reply = _rate(client, tenant, available, rate)

    assert reply.status_code == 400, reply.text
    assert "out_of_scope_rate" in reply.json()["description"]
    shown = client.get(f"/v1/classifiers/{available}", headers=tenant.headers).json()
    assert shown["out_of_scope_rate"] is None


def test_a_rate_out_of_range_names_the_range_and_an_unknown_field_is_refused(
    client: TestClient, tenant: Any, available: str
) -> None:
    out_of_range = _rate(client, tenant, available, 1)
    not_numbers = [
        client.patch(
            f"/v1/classifiers/{available}",
            content=f'{{"out_of_scope_rate": {value}}}',
            headers={**tenant.headers, "Content-Type": "application/json"},
        )
        for value in ("NaN", "Infinity")  # Python's JSON reads them; they are no rate
    ]
    unknown = client.patch(f"/v1/classifiers/{available}", json={"name": "x"}, headers=tenant.headers)

    assert "strictly between 0 and 1" in out_of_range.json()["description"]
    assert [reply.status_code for reply in not_numbers] == [400, 400]
    assert unknown.status_code == 400 and "name" in unknown.json()["description"]


def test_another_tenants_or_an_unknown_classifier_is_not_found(
    client: TestClient, tenant: Any, tenant_factory: Callable[..., Any], available: str
) -> None:
    other = tenant_factory()

    assert _rate(client, other, available, 0.05).status_code == 404
    assert _rate(client, tenant, "0" * 36, 0.05).status_code == 404
    assert (
        client.get(f"/v1/classifiers/{available}", headers=tenant.headers).json()["out_of_scope_rate"] is None
    )


def test_a_multi_label_classifier_has_no_out_of_scope_rate_to_set(
    client: TestClient, tenant: Any, create_classifier: Callable[..., httpx.Response]
) -> None:
    metadata = {"language": "en", "name": "tags", "mode": "multi_label"}
    cid = create_classifier(tenant, metadata=metadata).json()["classifier_id"]

    refused = _rate(client, tenant, cid, 0.05)
    reset = _rate(client, tenant, cid, None)

    assert refused.status_code == 409 and "single_label only" in refused.json()["description"]
    assert reset.status_code == 200 and reset.json()["out_of_scope_rate"] is None


def test_the_openapi_document_describes_the_body_and_the_refusals(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    operation = document["paths"]["/v1/classifiers/{classifier_id}"]["patch"]

    body = operation["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/ClassifierChange"}
    rate = document["components"]["schemas"]["ClassifierChange"]["properties"]["out_of_scope_rate"]
    assert (rate["exclusiveMinimum"], rate["exclusiveMaximum"]) == (0, 1)
    assert {"200", "400", "404", "409"} <= set(operation["responses"])
    info = document["components"]["schemas"]["ClassifierInfo"]["properties"]
    assert "out_of_scope_rate" in info
