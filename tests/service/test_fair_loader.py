"""The model loader pool: results and errors through futures, tenants served in turn."""

from __future__ import annotations

import threading
import time
from functools import partial

import pytest

from service.serving.fair_loader import FairLoader


def test_a_call_returns_its_result_or_raises_its_error_through_the_future() -> None:
    loader = FairLoader(2)
    assert not any(t.is_alive() for t in loader._threads)  # no idle threads before the first load
    try:
        assert loader.submit("t1", lambda: 42).result(timeout=10) == 42
        with pytest.raises(ZeroDivisionError):
            loader.submit("t1", lambda: 1 / 0).result(timeout=10)
    finally:
        loader.shutdown()


class _Calls:
    """Calls that record their names in the order they run; ``first`` is held until released."""

    def __init__(self, loader: FairLoader, tenant: str, first: str) -> None:
        self.order: list[str] = []
        self.started, self.release = threading.Event(), threading.Event()
        self.futures = [loader.submit(tenant, lambda: self.call(first, hold=True))]
        assert self.started.wait(10)  # running: what comes next is queued

    def call(self, name: str, hold: bool = False) -> str:
        if hold:
            self.started.set()
            self.release.wait(10)
        self.order.append(name)
        return name

    def finish(self) -> list[str]:
        self.release.set()
        return [f.result(timeout=10) for f in self.futures]


def test_a_tenant_with_a_backlog_does_not_hold_another_tenants_first_load_behind_it() -> None:
    """One thread: A's first call runs (held), four more of A's queue, then B's one. A first come,
    first served pool ran B's last; here it runs after one more of A's (A's turn came first)."""
    loader = FairLoader(1)
    try:
        calls = _Calls(loader, "A", "a0")
        calls.futures += [loader.submit("A", partial(calls.call, f"a{i}")) for i in range(1, 5)]
        calls.futures.append(loader.submit("B", lambda: calls.call("b0")))
        assert calls.finish() == ["a0", "a1", "a2", "a3", "a4", "b0"]
    finally:
        loader.shutdown()
    assert calls.order == ["a0", "a1", "b0", "a2", "a3", "a4"]


def test_tenants_take_turns_while_each_keeps_its_own_order() -> None:
    loader = FairLoader(1)
    try:
        calls = _Calls(loader, "X", "hold")
        calls.futures += [loader.submit(t, partial(calls.call, f"{t}{i}")) for t in "ABC" for i in range(2)]
        calls.finish()
    finally:
        loader.shutdown()
    assert calls.order == ["hold", "A0", "B0", "C0", "A1", "B1", "C1"]


def test_shutdown_cancels_what_has_not_started_and_refuses_more() -> None:
    loader, release, started = FairLoader(1), threading.Event(), threading.Event()

    def running() -> str:
        started.set()
        release.wait(10)
        return "finished"

    first = loader.submit("A", running)
    assert started.wait(10)
    queued = loader.submit("B", lambda: "never")
    loader.shutdown()
    release.set()
    assert first.result(timeout=10) == "finished"
    assert queued.cancelled()
    with pytest.raises(RuntimeError):
        loader.submit("A", lambda: None)
    deadline = time.monotonic() + 10
    while any(t.is_alive() for t in loader._threads):
        assert time.monotonic() < deadline
        time.sleep(0.01)
