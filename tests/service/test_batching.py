"""The inference batcher: concurrent calls share model calls and get exactly their own scores."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from service.serving.batching import Answered, InferenceBatcher
from trainer.encoder import shared_encoder
from trainer.encoder.registry import MINILM
from trainer.inference import LoadedModel

TEXTS = ["is it going to rain tomorrow", "how warm is it", "will it snow tonight", "sunny today?"]


class _Counting(LoadedModel):
    """The real model, counting its inference calls and the texts in each."""

    calls: list[int]

    def probabilities(self, texts, embeddings=None):  # type: ignore[no-untyped-def]
        self.calls.append(len(texts))
        return super().probabilities(texts, embeddings)


def _counting(model_dir: Path) -> _Counting:
    loaded = LoadedModel.load(model_dir)
    model = _Counting(
        loaded.labels, loaded.featurizer, loaded.model, sentence=loaded.sentence, in_scope=loaded.in_scope
    )
    model.calls = []
    return model


def test_concurrent_calls_are_batched_and_answered_alike(tiny_model: Path) -> None:
    model = _counting(tiny_model)
    alone = [model.classify([text])[0] for text in TEXTS]
    alone_in_scope = model.in_scope_scores(model.probabilities(TEXTS))
    assert alone_in_scope is not None
    model.calls.clear()
    batcher = InferenceBatcher(1)

    async def many() -> list[Answered]:
        return await asyncio.gather(*(batcher.classify(model, [t]) for t in TEXTS * 50))

    try:
        results = asyncio.run(many())
    finally:
        batcher.close()
    for answered, expected, in_scope in zip(results, alone * 50, alone_in_scope * 50, strict=True):
        [scores] = answered.scores
        assert [name for name, _ in scores] == [name for name, _ in expected]
        assert [c for _, c in scores] == pytest.approx([c for _, c in expected], abs=1e-6)
        assert answered.in_scope == pytest.approx([in_scope], abs=1e-6)
    assert sum(model.calls) == 200
    assert len(model.calls) < 200, f"no call was batched: {model.calls[:10]}..."


def test_tenants_encoder_models_share_one_encoder_call_per_batch(encoder_model: Path) -> None:
    """Two tenants' models on the shared encoder: the batch's texts go through it together (each
    distinct text once), then each model applies its own weights; every caller gets what the
    model alone gives."""
    first, second = _counting(encoder_model), _counting(encoder_model)
    second.labels = [f"other-{label}" for label in second.labels]
    encoder = shared_encoder(MINILM.name)
    alone = [first.classify([text])[0] for text in TEXTS]
    embeddings = first.embed(TEXTS)
    alone_in_scope = first.in_scope_scores(first.probabilities(TEXTS, embeddings), embeddings)
    assert alone_in_scope is not None
    calls, texts = encoder.calls, encoder.texts
    first.calls.clear()
    batcher = InferenceBatcher(1)

    async def both() -> list[Answered]:
        return await asyncio.gather(*(batcher.classify(m, [t]) for t in TEXTS * 20 for m in (first, second)))

    try:
        results = asyncio.run(both())
    finally:
        batcher.close()
    for n, answered in enumerate(results):
        [scores] = answered.scores
        expected = alone[(n // 2) % len(TEXTS)]
        assert [name.removeprefix("other-") for name, _ in scores] == [name for name, _ in expected]
        assert [c for _, c in scores] == pytest.approx([c for _, c in expected], abs=1e-5)
        # the nearest training text's cosine, from the shared encoder's embedding of the text
        assert answered.in_scope == pytest.approx([alone_in_scope[(n // 2) % len(TEXTS)]], abs=1e-4)
    model_calls = len(first.calls) + len(second.calls)
    assert encoder.calls - calls < model_calls, "each model encoded its own texts"
    assert encoder.texts - texts <= len(TEXTS) * (encoder.calls - calls)  # a text once a batch


def test_calls_on_different_models_do_not_mix(tiny_model: Path) -> None:
    first, second = _counting(tiny_model), _counting(tiny_model)
    second.labels = [f"other-{label}" for label in second.labels]
    batcher = InferenceBatcher(2)

    async def both() -> list[Answered]:
        return await asyncio.gather(*(batcher.classify(m, TEXTS) for m in (first, second) * 10))

    try:
        results = asyncio.run(both())
    finally:
        batcher.close()
    for n, answered in enumerate(results):
        prefix = "other-" if n % 2 else ""
        assert len(answered.scores) == len(TEXTS)
        assert all(name.startswith(prefix) for scores in answered.scores for name, _ in scores)


def test_a_failing_model_fails_only_its_own_callers(tiny_model: Path) -> None:
    good = _counting(tiny_model)

    class _Broken(_Counting):
        def probabilities(self, texts, embeddings=None):  # type: ignore[no-untyped-def]
            raise RuntimeError("weights on fire")

    broken = _Broken(good.labels, good.featurizer, good.model)
    batcher = InferenceBatcher(1)

    async def mixed() -> list[object]:
        calls = [batcher.classify(m, TEXTS[:1]) for m in (good, broken) * 5]
        return await asyncio.gather(*calls, return_exceptions=True)

    try:
        outcomes = asyncio.run(mixed())
    finally:
        batcher.close()
    assert all(isinstance(o, Answered) for o in outcomes[::2])
    assert all(isinstance(o, RuntimeError) and "on fire" in str(o) for o in outcomes[1::2])


def test_a_caller_that_goes_away_does_not_disturb_the_others(tiny_model: Path) -> None:
    model = _counting(tiny_model)
    batcher = InferenceBatcher(1)

    async def one_cancelled() -> list[object]:
        calls = [asyncio.ensure_future(batcher.classify(model, TEXTS)) for _ in range(5)]
        calls[0].cancel()
        return await asyncio.gather(*calls, return_exceptions=True)

    try:
        outcomes = asyncio.run(one_cancelled())
    finally:
        batcher.close()
    assert isinstance(outcomes[0], asyncio.CancelledError)
    assert all(isinstance(o, Answered) and len(o.scores) == len(TEXTS) for o in outcomes[1:])


class _Held(LoadedModel):
    """The real model, whose calls wait until ``gate`` is set."""

    gate: threading.Event

    def probabilities(self, texts, embeddings=None):  # type: ignore[no-untyped-def]
        assert self.gate.wait(timeout=30)
        return super().probabilities(texts, embeddings)


def _held(tiny_model: Path, gate: threading.Event) -> _Held:
    loaded = LoadedModel.load(tiny_model)
    model = _Held(loaded.labels, loaded.featurizer, loaded.model)
    model.gate = gate
    return model


def test_a_short_call_batched_with_another_models_long_one_is_answered_first(tiny_model: Path) -> None:
    """A thread that took both into one batch settled every caller after the last model's
    call: one tenant's single text waited for another's heavy collection (here, one that ends
    only once the short call is answered)."""
    first_done, heavy_done = threading.Event(), threading.Event()
    free = threading.Event()
    free.set()
    blocker, heavy = _held(tiny_model, first_done), _held(tiny_model, heavy_done)
    cheap = _held(tiny_model, free)
    batcher = InferenceBatcher(1)

    async def run() -> None:
        held = asyncio.ensure_future(batcher.classify(blocker, ["x"]))  # the one thread waits on it
        await asyncio.sleep(0.05)
        long_call = asyncio.ensure_future(batcher.classify(heavy, TEXTS * 7))
        short_call = asyncio.ensure_future(batcher.classify(cheap, TEXTS[:1]))
        await asyncio.sleep(0.05)
        first_done.set()  # the thread now takes the long and the short call as one batch
        await asyncio.wait_for(short_call, timeout=10)  # was answered only after the long one
        assert not long_call.done()
        heavy_done.set()
        await asyncio.gather(held, long_call)

    try:
        asyncio.run(run())
    finally:
        heavy_done.set()
        batcher.close()
