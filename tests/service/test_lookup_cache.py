"""The classify lookup cache: what it keeps, when it refuses to answer, and the generation rule."""

from __future__ import annotations

import time

from service.core.models import ClassifierStatus
from service.serving.classifying import Servable, ServingLookup
from service.serving.lookup_cache import LookupCache

DIGEST = "d" * 64
CID = "c" * 36


def _found(tenant_id: str = "t1", status: str = ClassifierStatus.AVAILABLE.value) -> ServingLookup:
    return ServingLookup(tenant_id, None, Servable(CID, status, "tenants/t1/classifiers/c/model"))


def _heard(**kwargs: float) -> LookupCache:
    cache = LookupCache(**kwargs)
    cache.heard()
    return cache


def test_keeps_an_available_classifier_and_answers_with_it() -> None:
    cache = _heard()
    found = _found()
    cache.put(DIGEST, CID, found, cache.generation())
    assert cache.get(DIGEST, CID) == found
    assert cache.get(DIGEST, "x" * 36) is None
    assert cache.get("e" * 64, CID) is None


def test_keeps_nothing_that_is_not_an_available_classifier() -> None:
    cache = _heard()
    for found in (
        _found(status=ClassifierStatus.TRAINING.value),
        ServingLookup("t1", None, None),  # unknown or another tenant's classifier
        ServingLookup("t1", None, Servable(CID, ClassifierStatus.AVAILABLE.value, None)),
    ):
        cache.put(DIGEST, CID, found, cache.generation())
    assert len(cache) == 0


def test_a_lookup_that_raced_an_invalidation_is_not_kept() -> None:
    cache = _heard()
    generation = cache.generation()  # read the database ...
    cache.forget_tenant("t2")  # ... while some tenant changed
    cache.put(DIGEST, CID, _found(), generation)
    assert cache.get(DIGEST, CID) is None


def test_forgetting_a_tenant_drops_only_its_entries() -> None:
    cache = _heard()
    cache.put(DIGEST, CID, _found("t1"), cache.generation())
    cache.put("e" * 64, CID, _found("t2"), cache.generation())
    cache.forget_tenant("t1")
    assert cache.get(DIGEST, CID) is None
    assert cache.get("e" * 64, CID) is not None


def test_answers_nothing_until_heard_from_and_again_once_silent_too_long() -> None:
    cache = LookupCache(stale_after_s=0.2)
    cache.put(DIGEST, CID, _found(), cache.generation())
    assert len(cache) == 0, "nothing is kept before the listener has subscribed"
    cache.heard()
    cache.put(DIGEST, CID, _found(), cache.generation())
    assert cache.get(DIGEST, CID) is not None
    time.sleep(0.3)
    assert not cache.usable()
    assert cache.get(DIGEST, CID) is None
    cache.heard()
    assert cache.get(DIGEST, CID) is not None


def test_losing_redis_empties_the_cache_at_once() -> None:
    cache = _heard()
    cache.put(DIGEST, CID, _found(), cache.generation())
    cache.lost()
    assert not cache.usable()
    cache.heard()
    assert cache.get(DIGEST, CID) is None


def test_entries_expire_after_max_age() -> None:
    cache = _heard(max_age_s=0.1)
    cache.put(DIGEST, CID, _found(), cache.generation())
    time.sleep(0.15)
    cache.heard()
    assert cache.get(DIGEST, CID) is None


def test_holds_at_most_max_entries_dropping_the_oldest() -> None:
    cache = _heard(max_entries=2)
    for n in range(3):
        cache.put(f"{n}" * 64, CID, _found(), cache.generation())
    assert len(cache) == 2
    assert cache.get("0" * 64, CID) is None
    assert cache.get("2" * 64, CID) is not None
