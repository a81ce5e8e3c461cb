"""NLC v1 classify and classify_collection.

``async`` routes: the caller, rate and classifier come from the lookup cache or one
worker-thread hop (:data:`ServingDep`); the model is loaded and run off the event loop
(``service.serving``). A ``POST`` classify call whose every need is in memory is answered
before routing, with this module's reply, by :mod:`service.api.fast_classify`.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Query, Request, Response
from pydantic_core import to_json

from service.api.deps import ServingDep, ServingTarget, charge_classify
from service.api.routes.classifiers import base_url
from service.api.routing import Router
from service.api.schemas import (
    Classification,
    ClassificationCollection,
    ClassifyCollectionInput,
    ClassifyInput,
)
from service.core.errors import BadRequest
from service.core.settings import Settings
from service.serving import classifying
from service.serving.out_of_scope_counts import OutOfScopeCounts

_JSON = "application/json"
# NLC v1 answered with at most ten classes, the most confident first (its SDK's models say "up
# to ten"): a model of 3,000 classes would otherwise send 3,000 a text
CLASSES_SHOWN = 10
router = Router(prefix="/v1/classifiers", tags=["classify"])


@router.post("/{classifier_id}/classify", response_model=Classification)
async def classify(request: Request, target: ServingDep, body: ClassifyInput) -> Response:
    """Classify one text."""
    return await _answer(request, target, body)


@router.get("/{classifier_id}/classify", response_model=Classification)
async def classify_query(
    request: Request,
    target: ServingDep,
    text: Annotated[str, Query(description="The text to classify (NLC v1's GET form of classify).")],
) -> Response:
    """Classify one text sent as the query parameter ``text``, as NLC v1 allowed besides the
    JSON body (``curl -G --data-urlencode text=...``); the same rules and reply as ``POST``."""
    return await _answer(request, target, ClassifyInput(text=text))


@router.post("/{classifier_id}/classify_collection", response_model=ClassificationCollection)
async def classify_collection(
    request: Request, target: ServingDep, body: ClassifyCollectionInput
) -> Response:
    """Classify up to ``max_collection`` texts in one call."""
    return await _answer(request, target, body)


ClassifyBody = ClassifyInput | ClassifyCollectionInput


def texts_of(body: ClassifyBody, settings: Settings) -> list[str]:
    """The texts a classify or classify_collection body asks about, checked by NLC's rules
    (BadRequest naming the field)."""
    if isinstance(body, ClassifyInput):
        return classifying.check_texts([body.text], fields=["text"], max_chars=settings.max_classify_chars)
    limit = settings.max_collection
    if not 1 <= len(body.collection) <= limit:
        raise BadRequest("collection", f"must hold 1 to {limit} texts (max_collection)")
    texts = [item.text for item in body.collection]
    fields = [f"collection.{i}.text" for i in range(len(texts))]
    return classifying.check_texts(texts, fields=fields, max_chars=settings.max_classify_chars)


def reply_json(
    request: Request,
    classifier_id: str,
    body: ClassifyBody,
    texts: list[str],
    classified: classifying.Classified,
    counts: OutOfScopeCounts,
) -> bytes:
    """The reply to ``body``, :class:`Classification` or :class:`ClassificationCollection`
    (shared with :mod:`service.api.fast_classify`). Written directly: it is built from the
    models' own fields, and building and re-validating pydantic models would cost most of a
    cached call. ``counts``: the app's, which the texts' out-of-scope decisions are counted in."""
    url = _url(request, classifier_id)
    results = [
        _result(text, scores, labels)
        for text, scores, labels in zip(texts, classified.scores, classified.labels, strict=True)
    ]
    if classified.in_scope is not None and classified.rate is not None:
        for result, score in zip(results, classified.in_scope, strict=True):
            result["in_scope_score"] = score
            result["out_of_scope"] = score < classified.rate
        counts.add(classifier_id, len(results), sum(result["out_of_scope"] is True for result in results))
    reply: dict[str, object]
    if isinstance(body, ClassifyInput):
        reply = {**results[0], "classifier_id": classifier_id, "url": url}
    else:
        reply = {"classifier_id": classifier_id, "url": url, "collection": results}
    return to_json(reply)


async def _answer(request: Request, target: ServingTarget, body: ClassifyBody) -> Response:
    texts = texts_of(body, target.settings)
    units = classifying.charge_units(texts)
    if units > 1:  # the dependency charged one unit
        await charge_classify(request.app.state, target.lookup, units - 1)
    classified = await classifying.classify(
        target.models,
        target.store,
        target.lookup.tenant_id,
        target.classifier,
        texts,
        still_exists=target.still_exists,
    )
    reply = reply_json(request, target.classifier.id, body, texts, classified, request.app.state.out_of_scope)
    return Response(reply, media_type=_JSON)


def _result(text: str, scores: classifying.Scores, labels: list[str] | None) -> dict[str, object]:
    """One text's :class:`service.api.schemas.CollectionResult`: its ``CLASSES_SHOWN`` most
    confident classes; a multi-label model's adds the classes it predicts, ``labels``."""
    result: dict[str, object] = {
        "text": text,
        "top_class": scores[0][0],
        "classes": [
            {"class_name": name, "confidence": confidence} for name, confidence in scores[:CLASSES_SHOWN]
        ],
    }
    if labels is not None:
        result["labels"] = labels
    return result


def _url(request: Request, classifier_id: str) -> str:
    return f"{base_url(request)}/v1/classifiers/{classifier_id}"
