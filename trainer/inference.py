"""The model directory format, and loading a trained model to classify texts.

A model directory holds ``weights.pt`` (tensors only: embedding stored as float16 to halve
the file, output layer, the featurizer's known buckets and IDF) and ``model.json`` (labels,
configs, hyper-parameters, metrics, the SHA-256 of ``weights.pt``). ``model.json`` is written
last, so its presence means the directory is complete. Loading uses
``torch.load(weights_only=True)``: nothing in a model directory is ever unpickled as code.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainer.checkpoint import write_atomic
from trainer.errors import CheckpointCorrupt
from trainer.features import Bags, Featurizer, FeaturizerConfig
from trainer.model import ModelConfig, TextClassifier

FORMAT = "taas-text-classifier/1"
WEIGHTS_FILE = "weights.pt"
META_FILE = "model.json"
_CLASSIFY_BATCH = 512


def save_model(
    out_dir: Path,
    model: TextClassifier,
    featurizer: Featurizer,
    labels: Sequence[str],
    extra: dict[str, Any],
) -> None:
    """Write a complete model directory (created if missing); ``extra`` goes into model.json."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tensors = {
        "embedding": model.embedding.weight.detach().to(torch.float16).contiguous(),
        "output.weight": model.output.weight.detach().clone(),
        "output.bias": model.output.bias.detach().clone(),
        "buckets": torch.from_numpy(featurizer.buckets.copy()),
        "idf": torch.from_numpy(featurizer.idf.copy()),
    }
    buffer = io.BytesIO()
    torch.save(tensors, buffer)
    payload = buffer.getvalue()
    write_atomic(out_dir / WEIGHTS_FILE, payload)
    meta = {
        "format": FORMAT,
        "labels": list(labels),
        "model": model.config.as_dict(),
        "featurizer": featurizer.config.as_dict(),
        "weights_sha256": hashlib.sha256(payload).hexdigest(),
        **extra,
    }
    write_atomic(out_dir / META_FILE, json.dumps(meta, indent=2, sort_keys=True).encode("utf-8"))


def read_metadata(model_dir: Path) -> dict[str, Any]:
    """The parsed model.json of a model directory. Raises CheckpointCorrupt if absent or invalid."""
    try:
        meta = json.loads((Path(model_dir) / META_FILE).read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointCorrupt(f"{model_dir}: no readable {META_FILE}: {exc}") from exc
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointCorrupt(f"{model_dir}: {META_FILE} is not a {FORMAT} model")
    return meta


class LoadedModel:
    """A trained classifier in memory, ready to classify texts."""

    def __init__(self, labels: list[str], featurizer: Featurizer, model: TextClassifier) -> None:
        self.labels = labels
        self.featurizer = featurizer
        self.model = model.eval()
        tensors = [*model.parameters()]
        self.nbytes = (
            sum(t.numel() * t.element_size() for t in tensors)
            + featurizer.buckets.nbytes
            + (featurizer.idf.nbytes)
        )

    @classmethod
    def load(cls, model_dir: Path) -> LoadedModel:
        """Load a model directory written by save_model.

        Raises CheckpointCorrupt when a file is missing, its checksum differs from model.json,
        or its contents do not match the recorded shapes.
        """
        model_dir = Path(model_dir)
        meta = read_metadata(model_dir)
        try:
            payload = (model_dir / WEIGHTS_FILE).read_bytes()
        except OSError as exc:
            raise CheckpointCorrupt(f"{model_dir}: cannot read {WEIGHTS_FILE}: {exc}") from exc
        if hashlib.sha256(payload).hexdigest() != meta.get("weights_sha256"):
            raise CheckpointCorrupt(f"{model_dir}: {WEIGHTS_FILE} does not match its checksum")
        try:
            tensors = torch.load(io.BytesIO(payload), weights_only=True)
            config = ModelConfig(**meta["model"])
            featurizer = Featurizer(
                FeaturizerConfig(**meta["featurizer"]), tensors["buckets"].numpy(), tensors["idf"].numpy()
            )
            model = TextClassifier(config)
            model.load_state_dict(
                {
                    "embedding.weight": tensors["embedding"].to(torch.float32),
                    "output.weight": tensors["output.weight"],
                    "output.bias": tensors["output.bias"],
                }
            )
        except (KeyError, TypeError, RuntimeError, ValueError) as exc:
            raise CheckpointCorrupt(f"{model_dir}: model files do not fit together: {exc}") from exc
        return cls(list(meta["labels"]), featurizer, model)

    def probabilities(self, texts: Sequence[str]) -> np.ndarray:
        """Class probabilities (texts x labels, float64, rows sum to 1) in label order."""
        rows: list[np.ndarray] = []
        for start in range(0, len(texts), _CLASSIFY_BATCH):
            bags = self.featurizer.transform(texts[start : start + _CLASSIFY_BATCH])
            with torch.inference_mode():
                logits = self.model(*bag_tensors(bags)).to(torch.float64)
            rows.append(torch.softmax(logits, dim=1).numpy())
        return np.concatenate(rows) if rows else np.zeros((0, len(self.labels)))

    def classify(self, texts: Sequence[str]) -> list[list[tuple[str, float]]]:
        """Per text: every class with its confidence, sorted descending, summing to 1."""
        result: list[list[tuple[str, float]]] = []
        for row in self.probabilities(texts):
            order = np.argsort(-row, kind="stable")
            result.append([(self.labels[i], float(row[i])) for i in order])
        return result


def bag_tensors(bags: Bags) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, offsets, weights) tensors for TextClassifier.forward, sharing the numpy memory."""
    return torch.from_numpy(bags.ids), torch.from_numpy(bags.offsets), torch.from_numpy(bags.weights)
