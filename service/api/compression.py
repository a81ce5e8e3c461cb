"""``CompressReplies``: gzip for the tenant API's larger replies, where the client accepts it.

A classifier's status carries its metrics, whose ``per_class`` grows with the classes: 283 KB
of JSON for 3,000 classes, polled for as long as the tenant waits for a training. Gzip at
level 5 makes that 15 KB for 0.85 ms of CPU (level 9: 13 KB for 3 ms; Starlette compresses a
reply of over 128 KiB in a worker thread, off the event loop; ``benchmarks/status_bench.py``). Replies under
``MINIMUM_BYTES`` (an error, a short listing) go as they are, and classify calls of the
serving version never reach this middleware (``service.api.fast_classify``).

Only ``/v1`` replies outside ``/v1/admin`` are compressed. The admin API's replies carry API
keys and the dashboard's pages a CSRF token beside text a tenant chose (names): compressing a
secret next to attacker-chosen text lets an observer of the reply's length guess the secret
(BREACH). A HEAD reply has no body to compress, so it answers as an uncompressed GET would.
"""

from __future__ import annotations

from starlette.middleware.gzip import GZipMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

MINIMUM_BYTES = 1024
LEVEL = 5


class CompressReplies:
    """ASGI middleware: Starlette's gzip for ``/v1`` replies other than ``/v1/admin``'s."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.gzip = GZipMiddleware(app, minimum_size=MINIMUM_BYTES, compresslevel=LEVEL)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] != "HEAD" and _compressed(scope["path"]):
            await self.gzip(scope, receive, send)
        else:
            await self.app(scope, receive, send)


def _compressed(path: str) -> bool:
    return path.startswith("/v1/") and not (path == "/v1/admin" or path.startswith("/v1/admin/"))
