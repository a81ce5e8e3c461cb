"""A classify call: its key and classifier looked up, its texts checked against NLC's input rules
and charged to the tenant's rate, and its model's scores (through :mod:`service.serving.model_cache`).
"""

from __future__ import annotations

import hmac
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from anyio import to_thread
from sqlalchemy import and_, bindparam, select
from sqlalchemy.orm import Session

from service.core.errors import BadRequest, Conflict, NotFound, unavailable
from service.core.models import ApiKey, Classifier, ClassifierStatus, ClassifierVersion, TenantQuota
from service.core.text import has_surrogates
from service.serving.batching import Answered, Scores
from service.serving.model_cache import ModelCache
from service.storage.store import ArtifactStore
from trainer.errors import CheckpointCorrupt
from trainer.inference import LoadedModel


@dataclass(frozen=True)
class Servable:
    """What classify needs of a classifier: its id, the status and model of the version it
    serves (``version`` None) or of the ``version`` a call pins, and the tenant's out-of-scope
    rate (None: the model's own), which holds for every version."""

    id: str
    status: str
    model_dir: str | None
    version: int | None = None
    out_of_scope_rate: float | None = None


@dataclass(frozen=True)
class ServingLookup:
    """A classify call's key resolved: its tenant, the tenant's classify-rate override, and the
    named classifier (None when it is unknown or another tenant's)."""

    tenant_id: str
    classify_rps: int | None
    classifier: Servable | None


# Built once: constructing a SELECT costs more than running it on SQLite (the hot path).
_LOOKUP = (
    select(
        ApiKey.key_hash,
        ApiKey.tenant_id,
        TenantQuota.classify_rps,
        Classifier.id,
        Classifier.status,
        Classifier.model_dir,
        Classifier.out_of_scope_rate,
    )
    .select_from(ApiKey)
    .outerjoin(TenantQuota, TenantQuota.tenant_id == ApiKey.tenant_id)
    .outerjoin(
        Classifier,
        and_(Classifier.id == bindparam("classifier_id"), Classifier.tenant_id == ApiKey.tenant_id),
    )
    .where(ApiKey.key_hash == bindparam("digest"), ApiKey.revoked_at.is_(None))
)


def pinned(session: Session, classifier_id: str, number: int) -> Servable:
    """Version ``number`` of the (already authorised) classifier, for a call that pins it with
    ``?version=``; NotFound when it has none such."""
    row = session.execute(
        select(ClassifierVersion.status, ClassifierVersion.model_dir, Classifier.out_of_scope_rate)
        .join(Classifier, Classifier.id == ClassifierVersion.classifier_id)
        .where(ClassifierVersion.classifier_id == classifier_id, ClassifierVersion.number == number)
    ).one_or_none()
    session.rollback()
    if row is None:
        raise NotFound("version", str(number))
    return Servable(classifier_id, row.status, row.model_dir, number, row.out_of_scope_rate)


def lookup(session: Session, digest: str, classifier_id: str) -> ServingLookup | None:
    """Resolve an active key (by its :func:`service.tenants.accounts.hash_key` digest) and the classifier
    it names in one query (the classify hot path); None when the key is unknown or revoked. The
    stored hash is compared in constant time."""
    row = session.execute(_LOOKUP, {"digest": digest, "classifier_id": classifier_id}).one_or_none()
    if row is None or not hmac.compare_digest(row.key_hash, digest):
        return None
    found = None
    if row.id is not None:
        found = Servable(row.id, row.status, row.model_dir, out_of_scope_rate=row.out_of_scope_rate)
    return ServingLookup(row.tenant_id, row.classify_rps, found)


UNIT_CHARS = 512  # characters of text (NFKC) that one unit of classify_rps covers


@dataclass(frozen=True)
class Classified:
    """Per text, every class with its confidence, highest first, and for a multi-label model the
    classes it predicts (``labels``; None per text for a single-label one, whose NLC reply has
    no such field); for a model with out-of-scope scoring, each text's in-scope score and the
    rate below which it is out of scope (trainer.in_scope; None without)."""

    scores: list[Scores]
    labels: list[list[str] | None]
    in_scope: list[float] | None = None
    rate: float | None = None


def classified(model: LoadedModel, answered: Answered, rate: float | None = None) -> Classified:
    """``answered`` by ``model``, with its predicted labels or its out-of-scope rate: ``rate``,
    the tenant's for the classifier, else the model's own."""
    scores = answered.scores
    if not model.multi_label:
        if rate is None and model.in_scope is not None:
            rate = model.in_scope.rate
        return Classified(scores, [None] * len(scores), answered.in_scope, rate)
    return Classified(scores, [model.labels_of(text_scores) for text_scores in scores])


def charge_units(texts: Sequence[str]) -> int:
    """The ``classify_rps`` units that ``texts`` cost: one a text, and one more for each further
    ``UNIT_CHARS`` characters of its NFKC form, which is what the featurizer reads (some
    characters become up to 18). A text's cost grows with its length: counted one a text, a
    tenant at its rate of 2,048-character texts (5 ms each; 19 ms once NFKC had made 12,000
    characters of them) took most of a 2-core API from the others."""
    return sum(
        max(1, -(-len(text if text.isascii() else unicodedata.normalize("NFKC", text)) // UNIT_CHARS))
        for text in texts
    )


def check_texts(texts: Sequence[str], *, fields: Sequence[str], max_chars: int) -> list[str]:
    """NLC's classify input rules: each text non-empty and at most ``max_chars``; BadRequest
    naming the text's field (``fields``, one per text)."""
    for text, field in zip(texts, fields, strict=True):
        if not text.strip():
            raise BadRequest(field, "text must not be empty")
        if has_surrogates(text):
            raise BadRequest(field, "text is not valid Unicode (unpaired surrogate)")
        if len(text) > max_chars:
            raise BadRequest(
                field, f"text has {len(text)} characters; the limit is {max_chars} (max_classify_chars)"
            )
    return list(texts)


async def classify(
    cache: ModelCache,
    store: ArtifactStore,
    tenant_id: str,
    classifier: Servable,
    texts: Sequence[str],
    *,
    still_exists: Callable[[], bool] = lambda: True,
) -> Classified:
    """Per text, every class with its confidence, highest first (summing to 1, unless the model
    is multi-label: then with the classes it predicts).

        Conflict when the classifier is not Available. When its model cannot be read: NotFound
        if ``still_exists()`` (run in a thread) says it was deleted meanwhile, else
        ServiceUnavailable. Loading and inference run off the event loop (inference micro-batched
    with concurrent calls, :mod:`service.serving.batching`).
    """
    if classifier.status != ClassifierStatus.AVAILABLE.value or not classifier.model_dir:
        what = f"classifier '{classifier.id}'"
        if classifier.version is not None:
            what = f"version {classifier.version} of {what}"
        raise Conflict(f"{what} is {classifier.status}; classify needs status Available")
    try:
        model = await cache.aget(tenant_id, classifier.id, store.resolve(classifier.model_dir))
    except (CheckpointCorrupt, OSError) as exc:
        if not await to_thread.run_sync(still_exists, limiter=cache.threads):
            if classifier.version is not None:
                raise NotFound("version", str(classifier.version)) from None
            raise NotFound("classifier", classifier.id) from None
        raise unavailable(f"the model of classifier '{classifier.id}' cannot be loaded", exc) from exc
    answered = await cache.inference.classify(model, list(texts))
    return classified(model, answered, classifier.out_of_scope_rate)
