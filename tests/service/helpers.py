"""Plain helpers shared by the API and security tests (imported as ``tests.service.helpers``)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.core.models import TrainingJob, utcnow
from service.storage.store import ArtifactStore
from service.training import leases
from trainer.data import LabelledData
from trainer.encoder import SentenceEncoder
from trainer.engine import train
from trainer.hparams import DEFAULT_HPARAMS

NLC_CSV = (
    "How hot is it today?,temperature\n"
    "Is it hot outside?,temperature\n"
    '"Will it be cold, tonight?",temperature\n'
    "Is it raining?,conditions\n"
    "Will it snow tomorrow?,conditions,temperature\n"
)

WEATHER = {
    "temperature": [
        "how hot is it",
        "is it cold outside",
        "what is the temperature",
        "will it be warm",
        "freezing today?",
    ],
    "conditions": ["is it raining", "will it snow", "is it sunny", "any storms coming", "is it cloudy"],
}


def nlc_files(csv: str | bytes = NLC_CSV, metadata: object | None = None) -> dict[str, Any]:
    """The multipart body the ibm-watson SDK sends for create_classifier (parts without file names)."""
    meta = json.dumps(metadata if metadata is not None else {"language": "en", "name": "weather"})
    return {
        "training_metadata": (None, meta, "application/json"),
        "training_data": (None, csv, "text/csv"),
    }


def store_dataset(client: Any, tenant: Any, body: bytes = b"text,label\nhot,t\ncold,t\nrain,c\n") -> str:
    """Upload ``body`` (a labelled CSV) as ``tenant``'s dataset; its id."""
    reply = client.post(
        "/v1/datasets?name=d", content=body, headers={**tenant.headers, "content-type": "text/csv"}
    )
    assert reply.status_code == 201, reply.text
    return str(reply.json()["dataset_id"])


def train_tiny_model(
    root: Path, classes: dict[str, list[str]] = WEATHER, encoder: SentenceEncoder | None = None
) -> Path:
    """Train a model on ``classes``' texts (by default a few weather questions) with the real
    trainer (a second or two), on the n-grams alone or with ``encoder``'s embedding."""
    texts = [t for texts in classes.values() for t in texts]
    labels = [label for label, texts in classes.items() for _ in texts]
    hparams = dataclasses.replace(DEFAULT_HPARAMS, buckets=1 << 12, max_features=4096, min_updates=60)
    result = train(
        LabelledData(texts, labels),
        workdir=root / "work",
        out_dir=root / "model",
        hparams=hparams,
        encoder=encoder,
    )
    return result.model_dir


def make_available(
    session: Session,
    store: ArtifactStore,
    tenant_id: str,
    classifier_id: str,
    model: Path,
    version: int = 1,
    metrics: dict[str, Any] | None = None,
) -> str:
    """Take a classifier's just-created ``version`` through the job state machine to Available
    with ``model`` (and ``metrics``, by default an accuracy of 1)."""
    job_id = session.scalar(
        select(TrainingJob.id).where(
            TrainingJob.classifier_id == classifier_id, TrainingJob.version == version
        )
    )
    assert job_id is not None
    lease = leases.claim_job(session, job_id, "test-worker", now=utcnow(), lease=timedelta(seconds=60))
    assert lease is not None
    model_dir = store.model_dir(tenant_id, classifier_id, version) / f"epoch-{lease.epoch}"
    shutil.copytree(model, model_dir)
    assert leases.finish_job(
        session,
        lease,
        model_dir=store.relative(model_dir),
        metrics=metrics or {"accuracy": 1.0},
        now=utcnow(),
    )
    return classifier_id


@contextmanager
def serving_in_thread(app: FastAPI) -> Iterator[int]:
    """``app`` under uvicorn on a free local port (yielded), in a thread, until the block ends:
    for clients that need a real socket (slow senders, generated clients, the ``taas`` commands)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    running = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not running.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.02)
    try:
        yield port
    finally:
        running.should_exit = True
        thread.join(timeout=30)
