"""Micro-batched inference: classify calls that arrive together run as one model call.

Handing each call to a worker thread and back costs more than the inference of one short
text, and under load each hand-off also waits for the GIL. Calls are instead queued for a few
serving threads; a thread takes everything queued (up to ``max_texts`` texts), runs one
``classify`` per model over all of its texts, the models with the fewest texts first, and
settles each model's callers in one callback on their event loop as soon as that model's call
is done (settled after the whole batch, one tenant's single text waited for another's
collection on a many-class model: half a second, with the other thread idle). One call alone
is served at once (no waiting for company); under load the batches grow by themselves,
because calls queue up while a thread is busy.

Inference is row-independent (an embedding bag and a linear layer per text): a text's scores
do not depend on which texts shared its batch, beyond float32 rounding in the matrix product
(differences near 1e-8).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from trainer.inference import LoadedModel

Scores = list[tuple[str, float]]
_Outcome = tuple["_Call", list[Scores] | BaseException]


@dataclass(frozen=True)
class _Call:
    model: LoadedModel
    texts: Sequence[str]
    future: asyncio.Future[list[Scores]]


class InferenceBatcher:
    """``await batcher.classify(model, texts)``: the model's scores, computed on a serving thread."""

    def __init__(self, threads: int, *, max_texts: int = 256, top: int | None = None) -> None:
        self.max_texts = max_texts
        self.top = top  # classes ranked per text of a single-label model (None: all)
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._serve, name=f"classify-{n}", daemon=True) for n in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    async def classify(self, model: LoadedModel, texts: Sequence[str]) -> list[Scores]:
        """Per text, every class with its confidence, highest first."""
        future: asyncio.Future[list[Scores]] = asyncio.get_running_loop().create_future()
        self._calls.put(_Call(model, texts, future))
        return await future

    def close(self) -> None:
        """Stop the serving threads once the calls already queued are served."""
        for _ in self._threads:
            self._calls.put(None)
        for thread in self._threads:
            thread.join(timeout=10)

    def _serve(self) -> None:
        while (first := self._calls.get()) is not None:
            batch, size = [first], len(first.texts)
            while size < self.max_texts:
                try:
                    call = self._calls.get_nowait()
                except queue.Empty:
                    break
                if call is None:  # closing: let another thread (or this one, next) see it
                    self._calls.put(None)
                    break
                batch.append(call)
                size += len(call.texts)
            self._run(batch)

    def _run(self, batch: list[_Call]) -> None:
        by_model: dict[int, list[_Call]] = {}
        for call in batch:
            by_model.setdefault(id(call.model), []).append(call)
        for calls in sorted(by_model.values(), key=lambda calls: sum(len(call.texts) for call in calls)):
            _dispatch(self._outcomes(calls))

    def _outcomes(self, calls: list[_Call]) -> list[_Outcome]:
        """Each call's scores from one classify of their (common) model over all their texts."""
        texts = [text for call in calls for text in call.texts]
        try:
            # a multi-label model's list holds every label it predicts, even beyond ``top``
            scores = calls[0].model.classify(texts, top=self.top)
        except Exception as exc:  # the callers re-raise it, as if they had called the model
            return [(call, exc) for call in calls]
        outcomes: list[_Outcome] = []
        start = 0
        for call in calls:
            outcomes.append((call, scores[start : start + len(call.texts)]))
            start += len(call.texts)
        return outcomes


def _dispatch(outcomes: list[_Outcome]) -> None:
    """Settle the outcomes' futures, one callback on each of their event loops."""
    loops: dict[int, tuple[asyncio.AbstractEventLoop, list[_Outcome]]] = {}
    for call, outcome in outcomes:
        loop = call.future.get_loop()
        loops.setdefault(id(loop), (loop, []))[1].append((call, outcome))
    for loop, settled in loops.values():
        try:
            loop.call_soon_threadsafe(_settle, settled)
        except RuntimeError:  # that loop has closed: nobody awaits these calls any more
            pass


def _settle(outcomes: list[_Outcome]) -> None:
    for call, outcome in outcomes:
        if call.future.done():  # the caller went away (cancelled)
            continue
        if isinstance(outcome, BaseException):
            call.future.set_exception(outcome)
        else:
            call.future.set_result(outcome)
