"""A model bundle exported from one `taas up` is imported into a second one with its own data dir,
and classifies there, and offline through ``LoadedModel.load``, exactly as at home."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from benchmarks import chaos
from trainer.inference import LoadedModel

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TEXTS = ["alpha beta gamma", "delta epsilon", "zeta eta theta iota"]


def _scores(client: httpx.Client, classifier_id: str) -> list[list[tuple[str, float]]]:
    body = {"collection": [{"text": t} for t in TEXTS]}
    reply = client.post(f"/v1/classifiers/{classifier_id}/classify_collection", json=body)
    assert reply.status_code == 200, reply.text
    return [[(c["class_name"], c["confidence"]) for c in r["classes"]] for r in reply.json()["collection"]]


def _same(a: list[list[tuple[str, float]]], b: list[list[tuple[str, float]]]) -> None:
    for ours, theirs in zip(a, b, strict=True):
        assert [name for name, _ in ours] == [name for name, _ in theirs]
        assert [c for _, c in ours] == pytest.approx([c for _, c in theirs], abs=1e-6)


def test_a_bundle_moves_a_classifier_between_installations(tmp_path: Path) -> None:
    for folder in ("home", "away"):
        (tmp_path / folder).mkdir()
    with chaos.platform(tmp_path / "home", "embedded") as home:
        _, client = home.tenant()
        classifier_id = chaos.create_classifier(client, chaos.short_csv(), "portable")
        assert chaos.wait_final(client, classifier_id)["status"] == "Available"
        bundle = client.get(f"/v1/classifiers/{classifier_id}/bundle")
        assert bundle.status_code == 200, bundle.text
        at_home = _scores(client, classifier_id)

    offline = tmp_path / "portable.taas"
    offline.write_bytes(bundle.content)
    _same(LoadedModel.load(offline).classify(TEXTS), at_home)

    with chaos.platform(tmp_path / "away", "embedded", workers=0) as away:
        _, client = away.tenant()
        files = {"bundle": ("portable.taas", bundle.content, "application/gzip")}
        imported = client.post("/v1/classifiers/import", files=files)
        assert imported.status_code == 201, imported.text
        assert imported.json()["name"] == "portable" and imported.json()["status"] == "Available"
        _same(_scores(client, imported.json()["classifier_id"]), at_home)
