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
    first), and for a multi-label model ``labels``; for a model with out-of-scope detection
    ``in_scope_score`` and ``out_of_scope`` at the model's own rate (a classifier's override of
    the rate is the service's, not the bundle's)."""
    from trainer.errors import TrainerError
    from trainer.inference import LoadedModel

    try:
        model = LoadedModel.load(bundle)
    except TrainerError as exc:  # BundleInvalid, CheckpointCorrupt
        raise ClientError(f"{bundle}: {exc}") from None
    embeddings = model.embed(texts)  # once for both (None: an n-gram model)
    probabilities = model.probabilities(texts, embeddings)
    answers = model.rank(probabilities)
    in_scope = model.in_scope_scores(probabilities, embeddings)
    results: list[dict[str, Any]] = []
    for number, (text, ranked) in enumerate(zip(texts, answers, strict=True)):
        result: dict[str, Any] = {
            "text": text,
            "top_class": ranked[0][0],
            "classes": [{"class_name": name, "confidence": confidence} for name, confidence in ranked],
        }
        if model.multi_label:  # as the API answers: the classes it predicts
            result["labels"] = model.labels_of(ranked)
        if in_scope is not None and model.in_scope is not None:
            result["in_scope_score"] = in_scope[number]
            result["out_of_scope"] = in_scope[number] < model.in_scope.rate
        results.append(result)
    return results
