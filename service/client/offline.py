"""``taas classify BUNDLE TEXT…``: classify with a model bundle on this machine, no service needed.

The one client module that uses the trainer (an import-linter exception in pyproject.toml): it
reads the bundle with :class:`trainer.inference.LoadedModel` and answers in the shape of the
API's classify replies, with the confidences the service would give. The trainer (and torch) is
imported only when a bundle is classified, so the other commands start fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from service.client.api import ClientError


def is_bundle(argument: str) -> bool:
    """Whether ``taas classify``'s first argument names a bundle file rather than a classifier id."""
    return Path(argument).is_file()


def classify(bundle: Path, texts: list[str]) -> list[dict[str, Any]]:
    """Per text, ``{"text", "top_class", "classes": [{"class_name", "confidence"}]}`` (highest
    first), and for a multi-label model ``labels``."""
    from trainer.errors import TrainerError
    from trainer.inference import LoadedModel

    try:
        model = LoadedModel.load(bundle)
    except TrainerError as exc:  # BundleInvalid, CheckpointCorrupt
        raise ClientError(f"{bundle}: {exc}") from None
    results: list[dict[str, Any]] = []
    for text, ranked in zip(texts, model.classify(texts), strict=True):
        result: dict[str, Any] = {
            "text": text,
            "top_class": ranked[0][0],
            "classes": [{"class_name": name, "confidence": confidence} for name, confidence in ranked],
        }
        if model.multi_label:  # as the API answers: the classes it predicts
            result["labels"] = model.labels_of(ranked)
        results.append(result)
    return results
