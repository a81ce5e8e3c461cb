"""IBM's own NLC client (ibm-watson 5.x) drives a classifier's whole life against `taas up`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ibm_cloud_sdk_core import ApiException
from ibm_cloud_sdk_core.authenticators import BasicAuthenticator
from ibm_watson import NaturalLanguageClassifierV1
from ibm_watson.natural_language_classifier_v1 import ClassifyInput

pytestmark = pytest.mark.e2e


def test_ibm_watson_sdk_creates_trains_classifies_lists_and_deletes(
    embedded_platform: Any, intents_nlc: Path, wait_until: Callable[..., Any]
) -> None:
    key = embedded_platform.create_tenant()
    nlc = NaturalLanguageClassifierV1(authenticator=BasicAuthenticator("apikey", key))
    nlc.set_service_url(embedded_platform.base_url)

    with open(intents_nlc, "rb") as training_data:
        created = nlc.create_classifier(
            training_data=training_data,
            training_metadata=json.dumps({"name": "intents", "language": "en"}),
        ).get_result()
    classifier_id = created["classifier_id"]
    assert (created["name"], created["language"], created["status"]) == ("intents", "en", "Training")

    wait_until(
        lambda: nlc.get_classifier(classifier_id).get_result()["status"] == "Available",
        timeout=180,
        interval=0.2,
        message="classifier Available",
    )
    # an English classifier reads the sentence encoder, and the SDK sees nothing of it
    assert nlc.get_classifier(classifier_id).get_result()["model"]["kind"] == "sentence-encoder+n-grams"
    single = nlc.classify(classifier_id, "book a flight to rome").get_result()
    assert single["top_class"] == "flights"
    assert sum(c["confidence"] for c in single["classes"]) == pytest.approx(1.0, abs=1e-3)
    collection = nlc.classify_collection(
        classifier_id,
        [ClassifyInput(text="will it rain in madrid"), ClassifyInput(text="play some jazz in rome")],
    ).get_result()["collection"]
    assert [item["top_class"] for item in collection] == ["weather", "music"]
    # the SDK's option to gzip request bodies (its classify was a 400: "body: not UTF-8")
    zipped = NaturalLanguageClassifierV1(authenticator=BasicAuthenticator("apikey", key))
    zipped.set_service_url(embedded_platform.base_url)
    zipped.set_enable_gzip_compression(True)
    assert zipped.classify(classifier_id, "book a flight to rome").get_result() == single
    listed = nlc.list_classifiers().get_result()["classifiers"]
    assert [c["classifier_id"] for c in listed] == [classifier_id]

    nlc.delete_classifier(classifier_id)

    with pytest.raises(ApiException) as missing:
        nlc.get_classifier(classifier_id)
    assert missing.value.status_code == 404
