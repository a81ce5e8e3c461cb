"""A real webhook receiver for tests: a threaded ``http.server`` on 127.0.0.1 that records every
request and answers from a script (``Receiver(answers=[503, 503])``: 503 twice, then 200),
optionally doing something first (``on_request``)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Received:
    """One request as the receiver saw it, and the status it answered."""

    path: str
    headers: dict[str, str]
    body: bytes
    answered: int

    @property
    def event(self) -> dict[str, Any]:
        """The JSON body."""
        parsed: dict[str, Any] = json.loads(self.body)
        return parsed


class Receiver:
    """Records requests; answers each with the next status of ``answers``, then 200, after
    calling ``on_request``."""

    def __init__(
        self, answers: list[int] | None = None, on_request: Callable[[], None] | None = None
    ) -> None:
        self.answers = list(answers or [])
        self.received: list[Received] = []
        self._lock = threading.Lock()
        receiver = self

        class _Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if on_request is not None:
                    on_request()
                with receiver._lock:
                    status = receiver.answers.pop(0) if receiver.answers else 200
                    receiver.received.append(Received(self.path, dict(self.headers), body, status))
                self.send_response(status)
                if 300 <= status < 400:
                    self.send_header("Location", "http://127.0.0.1:9/elsewhere")
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(b"not now" if status >= 300 else b"ok")

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        """The URL to register as a callback."""
        return f"http://127.0.0.1:{self.server.server_address[1]}/hooks/taas"

    def accepted(self) -> list[Received]:
        """The requests it answered with a 2xx."""
        with self._lock:
            return [r for r in self.received if 200 <= r.answered < 300]

    def all(self) -> list[Received]:
        """Every request so far."""
        with self._lock:
            return list(self.received)


@contextmanager
def running_receiver(
    answers: list[int] | None = None, on_request: Callable[[], None] | None = None
) -> Iterator[Receiver]:
    """A started :class:`Receiver`, shut down afterwards."""
    receiver = Receiver(answers, on_request)
    thread = threading.Thread(target=receiver.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()
        thread.join(timeout=5)
