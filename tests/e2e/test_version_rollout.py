"""Versions against `taas up`: train v1, train v2 on more data while classify is hammered (no
error, no 409), v2 is promoted when Available, roll back to v1, classify pinned to each; IBM's
NLC client, which knows nothing of versions, sees only the promoted version throughout."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from ibm_cloud_sdk_core import ApiException
from ibm_cloud_sdk_core.authenticators import BasicAuthenticator
from ibm_watson import NaturalLanguageClassifierV1

from tests.e2e.conftest import write_nlc

pytestmark = pytest.mark.e2e

V1_CLASSES = {"weather", "flights", "music"}
V2_CLASSES = V1_CLASSES | {"alarms"}
GRACE = 0.5  # seconds
PAUSE = 0.02  # seconds between calls: at most 50 a second
PLACES = ["paris", "berlin", "tokyo", "lima", "oslo", "cairo", "quito", "perth", "dakar", "hanoi"]


class Hammer:
    """Classifies in a loop through the NLC SDK (its own thread) and records, per call, when it
    began and the classes it answered with, or the error."""

    def __init__(self, nlc: NaturalLanguageClassifierV1, classifier_id: str) -> None:
        self.nlc, self.classifier_id = nlc, classifier_id
        self.seen: list[tuple[float, frozenset[str]]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Hammer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                result = self.nlc.classify(self.classifier_id, "wake me up in oslo").get_result()
                self.seen.append((began, frozenset(c["class_name"] for c in result["classes"])))
            except ApiException as exc:  # every refusal is a finding
                self.errors.append(f"{exc.code}: {exc.message}")
            self._stop.wait(PAUSE)  # within the tenant's default classify rate

    def classes_between(self, start: float, end: float) -> set[frozenset[str]]:
        """The distinct class sets answered by the calls that began between ``start`` (and the
        ``GRACE`` an announcement takes to reach every API process) and ``end``."""
        return {classes for at, classes in self.seen if start + GRACE < at < end}


def _classes(client: httpx.Client, classifier_id: str, query: str = "") -> set[str]:
    reply = client.post(f"/v1/classifiers/{classifier_id}/classify{query}", json={"text": "book oslo"})
    assert reply.status_code == 200, reply.text
    return {c["class_name"] for c in reply.json()["classes"]}


def test_retrain_promote_and_roll_back_while_classify_is_hammered(
    embedded_platform: Any, intents_nlc: Path, tmp_path: Path, wait_until: Callable[..., Any]
) -> None:
    key = embedded_platform.create_tenant()
    nlc = NaturalLanguageClassifierV1(authenticator=BasicAuthenticator("apikey", key))
    nlc.set_service_url(embedded_platform.base_url)
    client = embedded_platform.client(key)

    with open(intents_nlc, "rb") as training_data:
        created = nlc.create_classifier(
            training_data=training_data, training_metadata=json.dumps({"name": "intents", "language": "en"})
        ).get_result()
    cid = created["classifier_id"]
    wait_until(
        lambda: nlc.get_classifier(cid).get_result()["status"] == "Available",
        timeout=180,
        interval=0.2,
        message="version 1 Available",
    )
    more = intents_nlc.read_text().splitlines()
    alarms = [(f"wake me up in {p}", "alarms") for p in PLACES] + [
        (f"set an alarm in {p}", "alarms") for p in PLACES
    ]
    v2_csv = write_nlc([tuple(line.rsplit(",", 1)) for line in more] + alarms, tmp_path / "v2.csv")

    with Hammer(nlc, cid) as hammer:
        time.sleep(1.0)
        with open(v2_csv, "rb") as data:
            started = client.post(
                f"/v1/classifiers/{cid}/versions", files={"training_data": ("v2.csv", data)}
            )
        assert started.status_code == 201, started.text
        assert started.json()["version"] == 2
        wait_until(
            lambda: client.get(f"/v1/classifiers/{cid}/versions/2").json()["status"] == "Available",
            timeout=180,
            interval=0.2,
            message="version 2 Available",
        )
        promoted_at = time.monotonic()  # auto promote: v2 serves from its Available on
        assert nlc.get_classifier(cid).get_result()["status"] == "Available"
        time.sleep(2.0)
        rollback_sent_at = time.monotonic()
        rollback = client.post(f"/v1/classifiers/{cid}/versions/1/promote")
        assert rollback.status_code == 200, rollback.text
        rolled_back_at = time.monotonic()
        time.sleep(2.0)
        stopped_at = time.monotonic()

    assert hammer.errors == []  # no error and no 409 at any point
    answered = [classes for _, classes in hammer.seen]
    assert len(answered) > 20
    # Only whole versions were ever seen, in the order they were promoted: v1, v2, then v1.
    assert set(answered) <= {frozenset(V1_CLASSES), frozenset(V2_CLASSES)}
    switches = [b for a, b in zip(answered, answered[1:], strict=False) if a != b]
    assert switches == [frozenset(V2_CLASSES), frozenset(V1_CLASSES)]
    assert hammer.classes_between(promoted_at, rollback_sent_at) == {frozenset(V2_CLASSES)}
    assert hammer.classes_between(rolled_back_at, stopped_at) == {frozenset(V1_CLASSES)}

    assert _classes(client, cid) == V1_CLASSES
    assert _classes(client, cid, "?version=1") == V1_CLASSES
    assert _classes(client, cid, "?version=2") == V2_CLASSES
    listed = client.get(f"/v1/classifiers/{cid}/versions").json()
    assert [(v["version"], v["status"], v["serving"]) for v in listed["versions"]] == [
        (1, "Available", True),
        (2, "Available", False),
    ]
    info = nlc.get_classifier(cid).get_result()
    assert (info["status"], info["classifier_id"]) == ("Available", cid)
