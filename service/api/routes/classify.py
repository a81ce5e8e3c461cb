"""NLC v1 classify and classify_collection.

``async`` routes: the caller, rate and classifier are resolved in one worker-thread hop
(:data:`ServingDep`), the model is loaded and run off the event loop (``service.serving``).
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel

from service import serving
from service.api.deps import ServingDep, ServingTarget
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
async def classify(request: Request, target: ServingDep, body: ClassifyInput) -> Response:
    """Classify one text."""
    texts = serving.check_texts([body.text], field="text", max_chars=target.settings.max_text_chars)
    [scores] = await _classify(target, texts)
    result = CollectionResult.build(body.text, scores)
    reply = Classification(classifier_id=target.classifier.id, url=_url(request, target), **dict(result))
    return _json(reply)


@router.post("/{classifier_id}/classify_collection", response_model=ClassificationCollection)
async def classify_collection(
    request: Request, target: ServingDep, body: ClassifyCollectionInput
) -> Response:
    """Classify up to ``max_collection`` texts in one call."""
    limit = target.settings.max_collection
    if not 1 <= len(body.collection) <= limit:
        raise BadRequest("collection", f"must hold 1 to {limit} texts (max_collection)")
    texts = [item.text for item in body.collection]
    texts = serving.check_texts(texts, field="collection", max_chars=target.settings.max_text_chars)
    results = [
        CollectionResult.build(t, s) for t, s in zip(texts, await _classify(target, texts), strict=True)
    ]
    reply = ClassificationCollection(
        classifier_id=target.classifier.id, url=_url(request, target), collection=results
    )
    return _json(reply)


async def _classify(target: ServingTarget, texts: list[str]) -> list[serving.Scores]:
    return await serving.classify(
        target.models, target.store, target.classifier, texts, still_exists=target.still_exists
    )


def _json(reply: BaseModel) -> Response:
    # The reply is built from the model's own fields, so FastAPI's re-validation of it against
    # response_model (which still documents it) would only cost time on the hot path.
    return Response(reply.model_dump_json(), media_type="application/json")


def _url(request: Request, target: ServingTarget) -> str:
    return f"{base_url(request)}/v1/classifiers/{target.classifier.id}"
