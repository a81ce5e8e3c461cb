"""A multi-label classifier through `taas up`: NLC rows that name several classes train one
sigmoid per class; classify answers independent confidences and the predicted ``labels``; the
metrics are the multi-label ones; a single-label classifier's reply is unchanged."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import write_nlc

pytestmark = pytest.mark.e2e

PLACES = ["paris", "berlin", "tokyo", "lima", "oslo", "cairo", "quito", "perth", "dakar", "hanoi"]


def _rows() -> list[tuple[str, ...]]:
    weather = ["will it rain {}", "is snow expected {}", "how cold will it be {}"]
    travel = ["book a trip to {}", "cheap flights to {}", "hotels in {}"]
    rows: list[tuple[str, ...]] = []
    for place in PLACES:
        rows += [(t.format("tomorrow"), "weather") for t in weather[:1]]
        rows += [(t.format(place), "travel") for t in travel]
        rows += [(f"will it rain in {place} when i fly there", "weather", "travel")]
        rows += [(f"is snow expected in {place} during my trip", "weather", "travel")]
    rows += [(t.format(day), "weather") for t in weather for day in ("today", "tonight", "this week")]
    return rows


def test_a_multi_label_classifier_predicts_every_class_that_applies(
    embedded_platform: Any, tmp_path: Path, wait_until: Callable[..., Any]
) -> None:
    client = embedded_platform.client(embedded_platform.create_tenant())
    data = write_nlc(_rows(), tmp_path / "multi.csv")  # type: ignore[arg-type]
    with open(data, "rb") as training_data:
        created = client.post(
            "/v1/classifiers",
            files={
                "training_metadata": (
                    None,
                    json.dumps({"name": "m", "language": "en", "mode": "multi_label"}),
                ),
                "training_data": ("multi.csv", training_data, "text/csv"),
            },
        )
    assert created.status_code == 200, created.text
    assert created.json()["mode"] == "multi_label"
    cid = created.json()["classifier_id"]
    wait_until(
        lambda: client.get(f"/v1/classifiers/{cid}").json()["status"] in ("Available", "Failed"),
        timeout=180,
        interval=0.2,
        message="classifier trained",
    )
    info = client.get(f"/v1/classifiers/{cid}").json()
    assert info["status"] == "Available", info
    assert {"micro_f1", "macro_f1", "hamming_loss", "threshold"} <= set(info["metrics"])

    texts = ["will it rain in oslo when i fly there", "cheap flights to lima", "how cold will it be tonight"]
    reply = client.post(
        f"/v1/classifiers/{cid}/classify_collection", json={"collection": [{"text": t} for t in texts]}
    )
    assert reply.status_code == 200, reply.text
    results = reply.json()["collection"]
    assert [sorted(r["labels"]) for r in results] == [["travel", "weather"], ["travel"], ["weather"]]
    both = {c["class_name"]: c["confidence"] for c in results[0]["classes"]}
    assert min(both.values()) >= info["metrics"]["threshold"]  # each class on its own sigmoid
    one = client.post(f"/v1/classifiers/{cid}/classify", json={"text": texts[1]}).json()
    assert one["labels"] == ["travel"] and one["top_class"] == "travel"
