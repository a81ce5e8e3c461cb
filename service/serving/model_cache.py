"""The model cache: a memory-bounded LRU of loaded models, loaded off the event loop.

Nothing here runs on the event loop for long: a model is loaded on a small loader pool of
its own (a slow load never takes a thread that inference or the database needs, requests for
the same model share one load, and the tenants' loads take turns: :mod:`service.serving.fair_loader`),
database lookups run on a small, bounded set of worker threads (``ModelCache.threads``: more
threads than cores only fight over the GIL) and inference is micro-batched on as many serving
threads (``ModelCache.inference``).
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
from anyio import CapacityLimiter

from service.serving.batching import InferenceBatcher
from service.serving.fair_loader import FairLoader
from service.storage.store import read_fetched
from trainer.encoder import loaded_encoders
from trainer.inference import LoadedModel

_Key = tuple[str, str, str]  # tenant id, classifier id, model folder


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

    The pretrained sentence encoders that models read are the process's, loaded once and shared
    by every tenant (trainer.encoder): an encoder that a cached model reads counts against the
    budget once, whatever the number of models that read it, and is never evicted.
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
        """Approximate memory held by the cached models and the encoders they share."""
        with self._lock:
            return sum(m.nbytes for m in self._models.values()) + self._encoder_bytes()

    def evict(self, classifier_id: str, under: Path | None = None) -> None:
        """Drop every cached model of a classifier (it was deleted), or with ``under`` only those
        loaded from that folder (a deleted version's: a classify pinned to it had loaded it)."""
        with self._lock:
            for key in [k for k in self._models if k[1] == classifier_id]:
                if under is None or Path(key[2]).is_relative_to(under):
                    del self._models[key]

    def _encoder_bytes(self) -> int:
        """The bytes of the shared encoders that the cached models read, each once."""
        read = {model.encoder for model in self._models.values()}
        return sum(encoder.nbytes for name, encoder in loaded_encoders().items() if name in read)

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
        budget = self.budget_bytes - self._encoder_bytes()  # what the shared encoders leave the models
        while total > budget and len(self._models) > 1:
            share = budget / len(models)
            others = [key for key in self._models if key != keep]  # least recently used first
            victim = next((key for key in others if held[key[0]] > share and models[key[0]] > 1), others[0])
            dropped = self._models.pop(victim).nbytes
            total -= dropped
            held[victim[0]] -= dropped
            models[victim[0]] -= 1
            if not models[victim[0]]:  # its last model
                del held[victim[0]], models[victim[0]]


def use_one_torch_thread() -> None:
    """Make torch run each inference on one core: requests are the parallelism of an API process,
    and intra-op threads per request would only fight over the same cores."""
    torch.set_num_threads(1)
