"""``CompressReplies``: gzip for the tenant API's larger replies, where the client accepts it.

A classifier's status carries its metrics, whose ``per_class`` grows with the classes: 283 KB
of JSON for 3,000 classes, polled for as long as the tenant waits for a training. Gzip at
level 5 makes that 15 KB for 0.85 ms of CPU (level 9: 13 KB for 3 ms; Starlette compresses a
reply of over 128 KiB in a worker thread, off the event loop; ``benchmarks/status_bench.py``). Replies under
``MINIMUM_BYTES`` (an error, a short listing) go as they are, and classify calls of the
serving version never reach this middleware (``service.api.fast_classify``).

Only ``/v1`` replies outside ``/v1/admin`` and ``/v1/webhook_secret`` are compressed. Those
two carry API keys and signing secrets, and the dashboard's pages a CSRF token, beside text a
tenant chose (names): compressing a secret next to attacker-chosen text lets an observer of
the reply's length guess the secret (BREACH). A HEAD reply has no body to compress, so it
answers as an uncompressed GET would.
"""

from __future__ import annotations

from starlette.middleware.gzip import GZipMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

MINIMUM_BYTES = 1024
LEVEL = 5


class CompressReplies:
    """ASGI middleware: Starlette's gzip for ``/v1`` replies that carry no secret."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.gzip = GZipMiddleware(app, minimum_size=MINIMUM_BYTES, compresslevel=LEVEL)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] != "HEAD" and _compressed(scope["path"]):
            await self.gzip(scope, receive, send)
        else:
            await self.app(scope, receive, send)


_SECRETS = ("/v1/admin", "/v1/webhook_secret")


def _compressed(path: str) -> bool:
    return path.startswith("/v1/") and not any(path == p or path.startswith(f"{p}/") for p in _SECRETS)
