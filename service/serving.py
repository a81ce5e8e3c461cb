"""Serving: a memory-bounded LRU of loaded models, and classification with NLC's input rules."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

from service.errors import BadRequest, Conflict, ServiceUnavailable
from service.models import Classifier, ClassifierStatus
from service.store import ArtifactStore
from trainer.errors import CheckpointCorrupt
from trainer.inference import LoadedModel

Scores = list[tuple[str, float]]
_Key = tuple[str, str]


class ModelCache:
    """LRU of :class:`trainer.LoadedModel`, keyed by (classifier id, model dir), within a byte budget.

    Loading happens outside the cache lock, so a slow load never blocks hits on other models;
    concurrent requests for the same model wait on one load instead of each loading it.
    The newest model is kept even if it alone exceeds the budget.
    """

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._models: OrderedDict[_Key, LoadedModel] = OrderedDict()
        self._loading: dict[_Key, threading.Lock] = {}
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        """Approximate memory held by the cached models."""
        with self._lock:
            return sum(m.nbytes for m in self._models.values())

    def get(self, classifier_id: str, model_dir: Path) -> LoadedModel:
        """The loaded model in ``model_dir``; raises CheckpointCorrupt (or OSError) if unreadable."""
        key = (classifier_id, str(model_dir))
        with self._lock:
            if key in self._models:
                self._models.move_to_end(key)
                return self._models[key]
            load_lock = self._loading.setdefault(key, threading.Lock())
        with load_lock:
            with self._lock:
                if key in self._models:
                    return self._models[key]
            try:
                model = LoadedModel.load(model_dir)
            finally:
                with self._lock:
                    self._loading.pop(key, None)
            with self._lock:
                self._models[key] = model
                self._evict_over_budget()
            return model

    def evict(self, classifier_id: str) -> None:
        """Drop every cached model of a classifier (it was deleted)."""
        with self._lock:
            for key in [k for k in self._models if k[0] == classifier_id]:
                del self._models[key]

    def _evict_over_budget(self) -> None:
        total = sum(m.nbytes for m in self._models.values())
        while total > self.budget_bytes and len(self._models) > 1:
            _, oldest = self._models.popitem(last=False)
            total -= oldest.nbytes


def check_texts(texts: Sequence[str], *, field: str, max_chars: int) -> list[str]:
    """NLC's classify input rules: each text non-empty and at most ``max_chars``; BadRequest."""
    for text in texts:
        if not text.strip():
            raise BadRequest(field, "text must not be empty")
        if len(text) > max_chars:
            raise BadRequest(
                field, f"text has {len(text)} characters; the limit is {max_chars} (max_text_chars)"
            )
    return list(texts)


def classify(
    cache: ModelCache, store: ArtifactStore, classifier: Classifier, texts: Sequence[str]
) -> list[Scores]:
    """Per text, every class with its confidence, highest first, summing to 1.

    Conflict when the classifier is not Available; ServiceUnavailable when its model files
    cannot be read. Blocking (CPU-bound): call it off the event loop.
    """
    if classifier.status != ClassifierStatus.AVAILABLE.value or not classifier.model_dir:
        raise Conflict(
            f"classifier '{classifier.id}' is {classifier.status}; classify needs status Available"
        )
    try:
        model = cache.get(classifier.id, store.resolve(classifier.model_dir))
    except (CheckpointCorrupt, OSError) as exc:
        raise ServiceUnavailable(
            f"the model of classifier '{classifier.id}' cannot be loaded: {exc}"
        ) from exc
    return model.classify(list(texts))
