"""Each xdist worker process gets Redis databases of its own (tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests.conftest import REDIS_SERVER, redis_test_url


@pytest.mark.parametrize(("worker", "first", "last"), [(None, 10, 15), ("gw0", 10, 15), ("gw1", 4, 9)])
def test_each_worker_has_its_own_range(
    monkeypatch: pytest.MonkeyPatch, worker: str | None, first: int, last: int
) -> None:
    if worker is None:
        monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    else:
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    assert [redis_test_url(db) for db in (10, 15)] == [f"redis://{REDIS_SERVER}/{db}" for db in (first, last)]


def test_a_third_worker_is_refused_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw2")
    with pytest.raises(pytest.UsageError, match=r"at most 2 xdist workers \(-n 2\), not gw2"):
        redis_test_url(15)
