"""A loader pool that takes its next job from the tenants in turn.

Model loads (a fetch from the remote store, then the load itself: a tenth of a second to
seconds each) run on a few threads. A plain pool runs them first come, first served, so a
tenant classifying against fifty cold classifiers at once queued fifty loads ahead of every
other tenant's first classify. Here each tenant has its own queue and the threads serve the
tenants with work in rotation: another tenant's load waits for at most one load of each
tenant ahead of it per thread, not for the whole backlog.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

_T = TypeVar("_T")


class FairLoader:
    """``threads`` daemon threads running submitted calls, round-robin over the tenants."""

    def __init__(self, threads: int, *, name: str = "model-load") -> None:
        self._queues: OrderedDict[str, deque[tuple[Callable[[], object], Future[object]]]] = OrderedDict()
        self._ready = threading.Condition()
        self._closed = self._started = False
        # started at the first submit, as a ThreadPoolExecutor's: an API that never loads a
        # model (an admin-only replica, a test's app) runs no idle loader threads
        self._threads = [
            threading.Thread(target=self._serve, name=f"{name}-{n}", daemon=True) for n in range(threads)
        ]

    def submit(self, tenant_id: str, call: Callable[[], _T]) -> Future[_T]:
        """Queue ``call`` behind ``tenant_id``'s earlier ones; its future holds the result."""
        future: Future[_T] = Future()
        with self._ready:
            if self._closed:
                raise RuntimeError("the loader is shut down")
            self._queues.setdefault(tenant_id, deque()).append((call, future))  # type: ignore[arg-type]
            self._ready.notify()
            if not self._started:
                self._started = True
                for thread in self._threads:
                    thread.start()
        return future

    def shutdown(self) -> None:
        """Cancel what has not started; calls in progress finish on their threads."""
        with self._ready:
            self._closed = True
            for queue in self._queues.values():
                for _, future in queue:
                    future.cancel()
            self._queues.clear()
            self._ready.notify_all()

    def _next(self) -> tuple[Callable[[], object], Future[object]] | None:
        """The first queued call of the tenant whose turn it is; None once shut down."""
        with self._ready:
            while not self._queues and not self._closed:
                self._ready.wait()
            if self._closed:
                return None
            tenant_id, queue = next(iter(self._queues.items()))
            job = queue.popleft()
            if queue:
                self._queues.move_to_end(tenant_id)  # its next call after every other tenant's
            else:
                del self._queues[tenant_id]
            return job

    def _serve(self) -> None:
        while (job := self._next()) is not None:
            call, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = call()
            except BaseException as exc:  # handed to the awaiting request, as an executor does
                future.set_exception(exc)
            else:
                future.set_result(result)
