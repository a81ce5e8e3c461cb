"""Cancel, resume and delete while a real worker trains (`taas up`, SQLite, embedded Redis)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from benchmarks import chaos

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STOP_WITHIN_S = 10.0


def _claims(client: httpx.Client, classifier_id: str) -> list[dict[str, Any]]:
    return [e for e in chaos.events(client, classifier_id) if e["event"] == "claimed"]


def test_cancel_stops_training_frees_the_worker_and_resume_continues_from_the_checkpoint(
    tmp_path: Path,
) -> None:
    with chaos.platform(tmp_path, "embedded") as up:
        _, client = up.tenant()
        classifier_id = chaos.create_classifier(client, chaos.long_csv(), language=chaos.NGRAM_LANGUAGE)
        seen = chaos.wait_step(client, classifier_id, checkpoints=1)

        reply = client.post(f"/v1/classifiers/{classifier_id}/cancel")
        assert reply.status_code == 200, (reply.text, seen, chaos.events(client, classifier_id))
        assert reply.json()["status"] == "Unavailable"
        cancelled_at = time.time()
        # The worker is free again: it trains another job at once.
        other = chaos.create_classifier(client, chaos.short_csv(), "next")
        claimed = chaos.wait_for(lambda: _claims(client, other), 60, "next job claimed")
        assert chaos.at(claimed[0]) - cancelled_at < STOP_WITHIN_S
        kept = [e for e in chaos.events(client, classifier_id) if e["event"] == "checkpoint"][-1]
        assert chaos.info(client, classifier_id)["status"] == "Unavailable"
        chaos.wait_final(client, other)

        reply = client.post(f"/v1/classifiers/{classifier_id}/resume")
        assert reply.status_code == 200, reply.text
        final = chaos.wait_final(client, classifier_id)

        timeline = chaos.events(client, classifier_id)
        resumed = [e for e in timeline if e["event"] == "resumed"]
        assert final["status"] == "Available", final
        assert resumed and resumed[0]["step"] == kept["step"], [e["event"] for e in timeline]
        done = [e for e in timeline if e["event"] == "done"]
        assert len(done) == 1 and done[0]["step"] == final["progress"]["total_steps"]


def test_delete_during_training_stops_it_and_removes_every_file(tmp_path: Path) -> None:
    with chaos.platform(tmp_path, "embedded") as up:
        tenant_id, client = up.tenant()
        classifier_id = chaos.create_classifier(client, chaos.long_csv(), language=chaos.NGRAM_LANGUAGE)
        chaos.wait_step(client, classifier_id, checkpoints=1)
        folder = up.artifacts / "tenants" / tenant_id / "classifiers" / classifier_id
        assert folder.is_dir()

        assert client.delete(f"/v1/classifiers/{classifier_id}").status_code == 200
        deleted_at = time.time()
        other = chaos.create_classifier(client, chaos.short_csv(), "next")
        claimed = chaos.wait_for(lambda: _claims(client, other), 60, "next job claimed")

        assert chaos.at(claimed[0]) - deleted_at < STOP_WITHIN_S
        assert not folder.exists(), sorted(p.name for p in folder.rglob("*"))
        assert client.get(f"/v1/classifiers/{classifier_id}").status_code == 404
        assert chaos.wait_final(client, other)["status"] == "Available"
        assert not folder.exists()
