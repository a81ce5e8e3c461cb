"""Language codes: exactly the ones Watson NLC accepted; any other is a 400 naming the field."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from service.catalogue.classifiers import check_language
from service.core.errors import BadRequest
from tests.service.helpers import store_dataset

pytestmark = pytest.mark.dialect_neutral

NLC_LANGUAGES = ["en", "ar", "fr", "de", "it", "ja", "ko", "pt", "es"]
REFUSED: list[object] = [
    "xx",
    "en-GB-oed",
    "",
    "EN",
    "zh-TW",
    "zh-cn",
    "nl",
    "pt-BR",
    " en",
    "english!",
    1,
    None,
]


@pytest.mark.parametrize("language", NLC_LANGUAGES)
def test_each_nlc_language_code_is_accepted_as_given(language: str) -> None:
    assert check_language(language) == language


@pytest.mark.parametrize("language", REFUSED)
def test_other_codes_are_refused_naming_the_field_and_the_accepted_codes(language: object) -> None:
    with pytest.raises(BadRequest) as refused:
        check_language(language)

    assert refused.value.field == "language"
    assert str(refused.value) == "language: must be one of NLC's language codes: " + ", ".join(NLC_LANGUAGES)


def test_nlc_create_records_and_echoes_every_nlc_language(
    client: TestClient, tenant: Any, create_classifier: Callable[..., httpx.Response]
) -> None:
    for language in NLC_LANGUAGES:
        reply = create_classifier(tenant, metadata={"language": language, "name": language})

        assert reply.status_code == 200, reply.text
        cid = reply.json()["classifier_id"]
        assert client.get(f"/v1/classifiers/{cid}", headers=tenant.headers).json()["language"] == language


@pytest.mark.parametrize("language", ["xx", "en-GB-oed", ""])
def test_nlc_create_with_another_code_is_a_400_and_leaves_nothing(
    tenant: Any,
    create_classifier: Callable[..., httpx.Response],
    nothing_left_behind: Callable[[str], None],
    language: str,
) -> None:
    reply = create_classifier(tenant, metadata={"language": language, "name": "x"})

    assert reply.status_code == 400
    assert reply.json() == {
        "code": 400,
        "error": "Bad Request",
        "description": "training_metadata.language: must be one of NLC's language codes: "
        + ", ".join(NLC_LANGUAGES),
    }
    nothing_left_behind(tenant.id)


def test_json_create_from_a_dataset_refuses_another_code(client: TestClient, tenant: Any) -> None:
    did = store_dataset(client, tenant)

    reply = client.post(
        "/v1/classifiers", json={"name": "x", "language": "zh-TW", "dataset_id": did}, headers=tenant.headers
    )

    assert reply.status_code == 400
    assert reply.json()["description"].startswith("language: ")
    assert client.get("/v1/classifiers", headers=tenant.headers).json()["classifiers"] == []
