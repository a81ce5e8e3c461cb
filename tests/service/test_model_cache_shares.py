"""ModelCache's tenant-fair eviction with models of different sizes (fake models: only their
``nbytes`` matters to the budget, and they read no shared encoder)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import pytest

from service.serving import model_cache
from service.serving.model_cache import ModelCache

MB = 1 << 20


@dataclass
class _Fake:
    nbytes: int
    encoder: None = None


def test_a_tenant_cycling_small_models_does_not_evict_another_tenants_large_hot_model(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Budget 100 MB; tenant A serves one 60 MB model all the time, tenant B cycles through
    10 MB models. A's model is over an equal share (50 MB) by itself, and it was evicted at
    each of B's loads, though freeing 10 MB (B's least recently used) made room: the cache
    then held B's 50 MB and nothing else, and every A call paid a cold load."""
    sizes = {"a": 60 * MB, **{f"b{i}": 10 * MB for i in range(20)}}
    monkeypatch.setattr(model_cache, "read_fetched", lambda _fetch, folder, _load: _Fake(sizes[folder.name]))
    cache = ModelCache(budget_bytes=100 * MB)
    loads_of_a = 0

    async def run() -> None:
        nonlocal loads_of_a
        for i in range(20):
            if cache.peek("A", "a", tmp_path / "a") is None:
                loads_of_a += 1
                await cache.aget("A", "a", tmp_path / "a")
            await cache.aget("B", f"b{i}", tmp_path / f"b{i}")

    try:
        asyncio.run(run())
        held = sum(model.nbytes for model in cache._models.values())
        assert loads_of_a == 1
        assert held > 90 * MB
    finally:
        cache.close()
