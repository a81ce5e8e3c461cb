"""The model loader pool: results and errors through futures, tenants served in turn."""

from __future__ import annotations

import threading
import time

import pytest

from service.fair_loader import FairLoader


def test_a_call_returns_its_result_or_raises_its_error_through_the_future() -> None:
    loader = FairLoader(2)
    try:
        assert loader.submit("t1", lambda: 42).result(timeout=10) == 42
        with pytest.raises(ZeroDivisionError):
            loader.submit("t1", lambda: 1 / 0).result(timeout=10)
    finally:
        loader.shutdown()


def test_a_tenant_with_a_backlog_does_not_hold_another_tenants_first_load_behind_it() -> None:
    """One thread: A's first call runs (held), four more of A's queue, then B's one. A first come,
    first served pool ran B's last; here it runs after one more of A's (A's turn came first)."""
    loader, started, release, order = FairLoader(1), threading.Event(), threading.Event(), []

    def call(name: str) -> str:
        if name == "a0":
            started.set()
            release.wait(10)
        order.append(name)
        return name

    try:
        futures = [loader.submit("A", lambda: call("a0"))]
        assert started.wait(10)
        futures += [loader.submit("A", lambda n=f"a{i}": call(n)) for i in range(1, 5)]
        futures.append(loader.submit("B", lambda: call("b0")))
        release.set()
        assert [f.result(timeout=10) for f in futures] == ["a0", "a1", "a2", "a3", "a4", "b0"]
    finally:
        loader.shutdown()
    assert order == ["a0", "a1", "b0", "a2", "a3", "a4"]


def test_tenants_take_turns_while_each_keeps_its_own_order() -> None:
    loader, started, release, order = FairLoader(1), threading.Event(), threading.Event(), []

    def call(name: str) -> None:
        if name == "hold":
            started.set()
            release.wait(10)
        order.append(name)

    try:
        held = loader.submit("X", lambda: call("hold"))
        assert started.wait(10)
        futures = [loader.submit(t, lambda n=f"{t}{i}": call(n)) for t in "ABC" for i in range(2)]
        release.set()
        for future in [held, *futures]:
            future.result(timeout=10)
    finally:
        loader.shutdown()
    assert order == ["hold", "A0", "B0", "C0", "A1", "B1", "C1"]


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
