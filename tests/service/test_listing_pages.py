"""``GET /v1/classifiers`` and ``GET /v1/datasets`` a page at a time (``limit``, ``offset``),
with the listing's total; without either they answer NLC's list whole, as before."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.service.helpers import store_dataset


@pytest.fixture
def three_of_each(
    client: TestClient, tenant: Any, create_classifier: Callable[..., httpx.Response]
) -> tuple[list[str], list[str]]:
    """Three classifiers and three datasets of ``tenant``, oldest first: their ids."""
    made = [create_classifier(tenant).json()["classifier_id"] for _ in range(3)]
    stored = [store_dataset(client, tenant) for _ in range(3)]
    return made, stored


def test_without_paging_parameters_the_lists_keep_nlcs_shape(
    client: TestClient, tenant: Any, three_of_each: tuple[list[str], list[str]]
) -> None:
    made, stored = three_of_each

    classifiers = client.get("/v1/classifiers", headers=tenant.headers).json()
    datasets = client.get("/v1/datasets", headers=tenant.headers).json()

    assert list(classifiers) == ["classifiers"]
    assert [c["classifier_id"] for c in classifiers["classifiers"]] == made
    assert list(datasets) == ["datasets"] and [d["dataset_id"] for d in datasets["datasets"]] == stored


@pytest.mark.parametrize("listing", ["classifiers", "datasets"])
def test_pages_hold_limit_items_from_offset_with_the_total(
    client: TestClient, tenant: Any, three_of_each: tuple[list[str], list[str]], listing: str
) -> None:
    ids = dict(zip(["classifiers", "datasets"], three_of_each, strict=True))[listing]
    key = "classifier_id" if listing == "classifiers" else "dataset_id"

    def page(**params: int) -> dict[str, Any]:
        reply = client.get(f"/v1/{listing}", params=params, headers=tenant.headers)
        assert reply.status_code == 200, reply.text
        return dict(reply.json())

    first, second, past = page(limit=2), page(limit=2, offset=2), page(offset=5)
    assert [i[key] for i in first[listing]] == ids[:2]
    assert {k: first[k] for k in ("total", "limit", "offset")} == {"total": 3, "limit": 2, "offset": 0}
    assert [i[key] for i in second[listing]] == ids[2:] and second["total"] == 3
    assert past[listing] == [] and (past["total"], past["limit"], past["offset"]) == (3, 100, 5)


@pytest.mark.parametrize("query", ["limit=0", "limit=1001", "offset=-1", "limit=two"])
def test_a_page_out_of_range_is_400_naming_the_parameter(client: TestClient, tenant: Any, query: str) -> None:
    for listing in ("classifiers", "datasets"):
        reply = client.get(f"/v1/{listing}?{query}", headers=tenant.headers)

        assert reply.status_code == 400, reply.text
        assert reply.json()["description"].startswith(f"query.{query.split('=')[0]}:")
