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

Models that read a pretrained sentence encoder share it: the batch's texts for all such models,
of every tenant, go through the encoder in one forward per encoder (each distinct text once),
and each model then applies only its own weights to its texts' embeddings (the idea S-LoRA and
LoRAX use to serve thousands of adapters on one base model, here on the CPU). The encoder's
forward is most of such a model's cost, and it grows less than linearly with the batch.

Inference is row-independent (an embedding bag and a linear layer per text): a text's scores
do not depend on which texts shared its batch, beyond float32 rounding in the matrix product
(differences near 1e-8). The encoder pads a batch to its longest text and masks the padding,
which moves an embedding by float32 rounding too (about 1e-7).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trainer.encoder import shared_encoder
from trainer.inference import LoadedModel

Scores = list[tuple[str, float]]


@dataclass(frozen=True)
class Answered:
    """Per text, every class (or the ``top`` ranked) with its confidence, highest first, and
    its in-scope score (trainer.in_scope; None for a model without out-of-scope scoring)."""

    scores: list[Scores]
    in_scope: list[float] | None


_Outcome = tuple["_Call", Answered | BaseException]


@dataclass(frozen=True)
class _Call:
    model: LoadedModel
    texts: Sequence[str]
    future: asyncio.Future[Answered]


class InferenceBatcher:
    """``await batcher.classify(model, texts)``: the model's answers, computed on a serving thread."""

    def __init__(self, threads: int, *, max_texts: int = 256, top: int | None = None) -> None:
        self.max_texts = max_texts
        self.top = top  # classes ranked per text of a single-label model (None: all)
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._serve, name=f"classify-{n}", daemon=True) for n in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    async def classify(self, model: LoadedModel, texts: Sequence[str]) -> Answered:
        """Per text, every class with its confidence, highest first, and its in-scope score."""
        future: asyncio.Future[Answered] = asyncio.get_running_loop().create_future()
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
        embedded = _SharedEmbeddings(batch)
        for calls in sorted(by_model.values(), key=lambda calls: sum(len(call.texts) for call in calls)):
            _dispatch(self._outcomes(calls, embedded))

    def _outcomes(self, calls: list[_Call], embedded: _SharedEmbeddings) -> list[_Outcome]:
        """Each call's scores from one classify of their (common) model over all their texts."""
        texts = [text for call in calls for text in call.texts]
        try:
            model = calls[0].model
            embeddings = embedded.of(model, texts)
            probabilities = model.probabilities(texts, embeddings)
            # a multi-label model's list holds every label it predicts, even beyond ``top``
            scores = model.rank(probabilities, top=self.top)
            in_scope = model.in_scope_scores(probabilities, embeddings)
        except Exception as exc:  # the callers re-raise it, as if they had called the model
            return [(call, exc) for call in calls]
        outcomes: list[_Outcome] = []
        start = 0
        for call in calls:
            end = start + len(call.texts)
            texts_in_scope = None if in_scope is None else in_scope[start:end]
            outcomes.append((call, Answered(scores[start:end], texts_in_scope)))
            start = end
        return outcomes


class _SharedEmbeddings:
    """The sentence embeddings of a batch's texts, one encoder forward per encoder for every
    model (of any tenant) that reads it, computed at the first model that asks."""

    def __init__(self, batch: list[_Call]) -> None:
        self._texts: dict[str, dict[str, None]] = {}  # encoder -> its models' texts, distinct
        self._layers: dict[str, dict[int, None]] = {}  # encoder -> the layers its models read
        for call in batch:
            sentence = call.model.sentence
            if sentence is not None:
                self._texts.setdefault(sentence.encoder, {}).update(dict.fromkeys(call.texts))
                self._layers.setdefault(sentence.encoder, {}).update(dict.fromkeys(sentence.layers))
        self._done: dict[str, tuple[dict[str, int], dict[int, np.ndarray]] | BaseException] = {}

    def of(self, model: LoadedModel, texts: list[str]) -> np.ndarray | None:
        """The embeddings ``model`` reads for ``texts`` (None for an n-gram model). Raises what
        the encoder raised, for every model that reads it."""
        sentence = model.sentence
        if sentence is None:
            return None
        done = self._done.get(sentence.encoder)
        if done is None:
            done = self._done[sentence.encoder] = self._encode(sentence.encoder)
        if isinstance(done, BaseException):
            raise done
        index, by_layer = done
        rows = [index[text] for text in texts]
        return np.hstack([by_layer[layer][rows] for layer in sentence.layers])

    def _encode(self, name: str) -> tuple[dict[str, int], dict[int, np.ndarray]] | BaseException:
        texts, layers = list(self._texts[name]), tuple(self._layers[name])
        try:
            encoder = shared_encoder(name)
            matrix = encoder.encode(texts, layers)
        except Exception as exc:  # each model's callers get it, as if they had encoded
            return exc
        width = encoder.dim
        by_layer = {layer: matrix[:, i * width : (i + 1) * width] for i, layer in enumerate(layers)}
        return {text: i for i, text in enumerate(texts)}, by_layer


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
