"""NLC v1 classify and classify_collection (sync routes: inference runs in the thread pool)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from service import serving
from service.api.deps import ClassifierDep, ModelCacheDep, SettingsDep, StoreDep
from service.api.routes.classifiers import base_url
from service.api.schemas import (
    Classification,
    ClassificationCollection,
    ClassifyCollectionInput,
    ClassifyInput,
    CollectionResult,
)
from service.errors import BadRequest

router = APIRouter(prefix="/v1/classifiers", tags=["classify"])


@router.post("/{classifier_id}/classify", response_model=Classification)
def classify(
    request: Request,
    classifier: ClassifierDep,
    body: ClassifyInput,
    settings: SettingsDep,
    store: StoreDep,
    models: ModelCacheDep,
) -> Classification:
    """Classify one text."""
    texts = serving.check_texts([body.text], field="text", max_chars=settings.max_text_chars)
    [scores] = serving.classify(models, store, classifier, texts)
    result = CollectionResult.build(body.text, scores)
    return Classification(
        classifier_id=classifier.id, url=_url(request, classifier.id), **result.model_dump()
    )


@router.post("/{classifier_id}/classify_collection", response_model=ClassificationCollection)
def classify_collection(
    request: Request,
    classifier: ClassifierDep,
    body: ClassifyCollectionInput,
    settings: SettingsDep,
    store: StoreDep,
    models: ModelCacheDep,
) -> ClassificationCollection:
    """Classify up to ``max_collection`` texts in one call."""
    if not 1 <= len(body.collection) <= settings.max_collection:
        raise BadRequest("collection", f"must hold 1 to {settings.max_collection} texts (max_collection)")
    texts = serving.check_texts(
        [i.text for i in body.collection], field="collection", max_chars=settings.max_text_chars
    )
    results = [
        CollectionResult.build(t, s)
        for t, s in zip(texts, serving.classify(models, store, classifier, texts), strict=True)
    ]
    return ClassificationCollection(
        classifier_id=classifier.id, url=_url(request, classifier.id), collection=results
    )


def _url(request: Request, classifier_id: str) -> str:
    return f"{base_url(request)}/v1/classifiers/{classifier_id}"
