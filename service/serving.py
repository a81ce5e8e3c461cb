"""Serving: a memory-bounded LRU of loaded models, and classification with NLC's input rules.

Nothing here runs on the event loop for long: a model is loaded on a small loader pool of
its own (a slow load never takes a thread that inference or the database needs, requests for
the same model share one load, and the tenants' loads take turns: :mod:`service.fair_loader`),
database lookups run on a small, bounded set of worker threads (``ModelCache.threads``: more
threads than cores only fight over the GIL) and inference is micro-batched on as many serving
threads (``ModelCache.inference``).
"""

from __future__ import annotations

import asyncio
import hmac
import threading
import unicodedata
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
from anyio import CapacityLimiter, to_thread
from sqlalchemy import and_, bindparam, select
from sqlalchemy.orm import Session

from service.batching import InferenceBatcher, Scores
from service.errors import BadRequest, Conflict, NotFound, unavailable
from service.fair_loader import FairLoader
from service.models import ApiKey, Classifier, ClassifierStatus, ClassifierVersion, TenantQuota
from service.store import ArtifactStore, read_fetched
from service.training_data import has_surrogates
from trainer.errors import CheckpointCorrupt
from trainer.inference import LoadedModel

_Key = tuple[str, str, str]  # tenant id, classifier id, model folder


@dataclass(frozen=True)
class Servable:
    """What classify needs of a classifier: its id, and the status and model of the version it
    serves (``version`` None) or of the ``version`` a call pins."""

    id: str
    status: str
    model_dir: str | None
    version: int | None = None


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
        select(ClassifierVersion.status, ClassifierVersion.model_dir).where(
            ClassifierVersion.classifier_id == classifier_id, ClassifierVersion.number == number
        )
    ).one_or_none()
    session.rollback()
    if row is None:
        raise NotFound("version", str(number))
    return Servable(classifier_id, row.status, row.model_dir, number)


def lookup(session: Session, digest: str, classifier_id: str) -> ServingLookup | None:
    """Resolve an active key (by its :func:`service.tenancy.hash_key` digest) and the classifier
    it names in one query (the classify hot path); None when the key is unknown or revoked. The
    stored hash is compared in constant time."""
    row = session.execute(_LOOKUP, {"digest": digest, "classifier_id": classifier_id}).one_or_none()
    if row is None or not hmac.compare_digest(row.key_hash, digest):
        return None
    found = Servable(row.id, row.status, row.model_dir) if row.id is not None else None
    return ServingLookup(row.tenant_id, row.classify_rps, found)


class ModelCache:
    """LRU of :class:`trainer.LoadedModel`, keyed by (tenant, classifier, model dir), within a
    byte budget that no tenant can take from the others: over budget, the least recently used
    model of a tenant holding more than an equal share in several models goes first
    (:meth:`_evict_over_budget`).

    Models load lazily, on the first classify, on a loader pool of their own: a slow load
    never blocks the event loop, hits on other models, or the threads that run inference, and
    concurrent requests for one model await a single load. The newest model is kept even if
    it alone exceeds the budget. A model deleted while it loads may be cached once more; it is
    unreachable (classify looks the classifier up first) and ages out of the LRU.
    """

    def __init__(
        self,
        budget_bytes: int,
        *,
        loaders: int = 2,
        threads: int = 2,
        fetch: Callable[[Path], Path] = lambda model_dir: model_dir,
        top: int | None = None,
    ) -> None:
        self.budget_bytes = budget_bytes
        # Makes the model folder local before a load: ArtifactStore.fetch downloads it from the
        # remote store on nodes without a shared file system (on the loader thread).
        self._fetch = fetch
        # Classify work runs on at most ``threads`` threads at once (more only contend for the
        # GIL and stretch every request's latency): database lookups that miss the lookup cache
        # on worker threads, inference micro-batched on serving threads of its own.
        self.threads = CapacityLimiter(threads)
        self.inference = InferenceBatcher(threads, top=top)  # ``top`` classes ranked a text
        self._models: OrderedDict[_Key, LoadedModel] = OrderedDict()
        self._pending: dict[_Key, asyncio.Future[LoadedModel]] = {}  # touched only on the loop
        self._lock = threading.Lock()
        self._loader = FairLoader(loaders)  # the tenants' loads in turn, not first come first served

    def __len__(self) -> int:
        with self._lock:
            return len(self._models)

    def peek(self, tenant_id: str, classifier_id: str, model_dir: Path) -> LoadedModel | None:
        """The model if it is loaded already (never loads)."""
        key = (tenant_id, classifier_id, str(model_dir))
        with self._lock:
            model = self._models.get(key)
            if model is not None:
                self._models.move_to_end(key)
            return model

    async def aget(self, tenant_id: str, classifier_id: str, model_dir: Path) -> LoadedModel:
        """The loaded model in ``model_dir``, loading it off the event loop on a miss.

        Concurrent callers for one model await a single load; a caller that goes away does not
        cancel it for the others. Raises CheckpointCorrupt (or OSError) if unreadable.
        """
        model = self.peek(tenant_id, classifier_id, model_dir)
        if model is not None:
            return model
        key = (tenant_id, classifier_id, str(model_dir))
        pending = self._pending.get(key)
        if pending is None:
            pending = asyncio.wrap_future(self._loader.submit(tenant_id, partial(self._load, key, model_dir)))
            self._pending[key] = pending
            pending.add_done_callback(lambda _done: self._pending.pop(key, None))
        return await asyncio.shield(pending)

    def close(self) -> None:
        """Stop the loader threads (loads in progress finish) and drop every model."""
        self._loader.shutdown()
        self.inference.close()
        with self._lock:
            self._models.clear()

    def _load(self, key: _Key, model_dir: Path) -> LoadedModel:
        # a worker sharing this root may drop its model once published: then fetched again
        model = read_fetched(self._fetch, model_dir, LoadedModel.load)
        with self._lock:
            self._models[key] = model
            self._models.move_to_end(key)
            self._evict_over_budget(keep=key)
        return model

    @property
    def nbytes(self) -> int:
        """Approximate memory held by the cached models."""
        with self._lock:
            return sum(m.nbytes for m in self._models.values())

    def evict(self, classifier_id: str, under: Path | None = None) -> None:
        """Drop every cached model of a classifier (it was deleted), or with ``under`` only those
        loaded from that folder (a deleted version's: a classify pinned to it had loaded it)."""
        with self._lock:
            for key in [k for k in self._models if k[1] == classifier_id]:
                if under is None or Path(key[2]).is_relative_to(under):
                    del self._models[key]

    def _evict_over_budget(self, keep: _Key) -> None:
        """Drop models, least recently used first, until the rest fit the budget, taking them
        from the tenants that hold more than an equal share (the budget over the tenants with
        a model here) in more than one model while there are such, and never ``keep`` (the
        model just loaded, kept even if it alone exceeds the budget). Plain LRU let one tenant
        cycling through its large models evict every other tenant's, whose next classify then
        paid a cold load. A tenant's one model larger than a share is left to plain LRU:
        evicting it gave no other tenant anything it needed (a tenant serving one model of 60%
        of the budget lost it at every load of another tenant cycling small ones, which left
        the cache half empty)."""
        held: Counter[str] = Counter()
        models: Counter[str] = Counter()
        for (tenant_id, _, _), model in self._models.items():
            held[tenant_id] += model.nbytes
            models[tenant_id] += 1
        total = held.total()
        while total > self.budget_bytes and len(self._models) > 1:
            share = self.budget_bytes / len(models)
            others = [key for key in self._models if key != keep]  # least recently used first
            victim = next((key for key in others if held[key[0]] > share and models[key[0]] > 1), others[0])
            dropped = self._models.pop(victim).nbytes
            total -= dropped
            held[victim[0]] -= dropped
            models[victim[0]] -= 1
            if not models[victim[0]]:  # its last model
                del held[victim[0]], models[victim[0]]


UNIT_CHARS = 512  # characters of text (NFKC) that one unit of classify_rps covers


@dataclass(frozen=True)
class Classified:
    """Per text, every class with its confidence, highest first, and for a multi-label model the
    classes it predicts (``labels``; None per text for a single-label one, whose NLC reply has
    no such field)."""

    scores: list[Scores]
    labels: list[list[str] | None]


def classified(model: LoadedModel, scores: list[Scores]) -> Classified:
    """``scores`` of ``model`` with its predicted labels."""
    if not model.multi_label:
        return Classified(scores, [None] * len(scores))
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
    with concurrent calls, :mod:`service.batching`).
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
    return classified(model, await cache.inference.classify(model, list(texts)))


def use_one_torch_thread() -> None:
    """Make torch run each inference on one core: requests are the parallelism of an API process,
    and intra-op threads per request would only fight over the same cores."""
    torch.set_num_threads(1)
