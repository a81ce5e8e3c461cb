"""``CompressReplies``: gzip for the tenant API's larger replies, where the client accepts it.

A classifier's status carries its metrics, whose ``per_class`` grows with the classes: 283 KB
of JSON for 3,000 classes, polled for as long as the tenant waits for a training. Gzip at
level 5 makes that 15 KB for 0.85 ms of CPU (level 9: 13 KB for 3 ms; Starlette compresses a
reply of over 128 KiB in a worker thread, off the event loop; ``benchmarks/status_bench.py``).
Replies under ``MINIMUM_BYTES`` (an error, a short listing) go as they are, and so do classify
replies, which the fast path (``service.api.fast_classify``) answers ahead of this middleware:
those the route answers instead (a first call, ``?version=``) are left alike. A client that
refuses gzip (``gzip;q=0``, RFC 9110 12.5.3) gets none, and one that writes ``GZIP`` gets it:
Starlette looks for "gzip" anywhere in the header, as written.

Only ``/v1`` replies outside ``/v1/admin`` and ``/v1/webhook_secret`` are compressed. Those
two carry API keys and signing secrets, and the dashboard's pages a CSRF token, beside text a
tenant chose (names): compressing a secret next to attacker-chosen text lets an observer of
the reply's length guess the secret (BREACH). A HEAD reply has no body to compress, so it
answers as an uncompressed GET would.
"""

from __future__ import annotations

from starlette.datastructures import Headers
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
        if (
            scope["type"] == "http"
            and scope["method"] != "HEAD"
            and _compressed(scope["path"])
            and _accepts_gzip(Headers(scope=scope).get("accept-encoding", ""))
        ):
            # as the one coding Starlette then sees: it looks for "gzip" in the header as written
            headers = [(k, v) for k, v in scope["headers"] if k != b"accept-encoding"]
            await self.gzip({**scope, "headers": [*headers, (b"accept-encoding", b"gzip")]}, receive, send)
        else:
            await self.app(scope, receive, send)


_SECRETS = ("/v1/admin", "/v1/webhook_secret")
_CLASSIFY = ("/classify", "/classify_collection")


def _compressed(path: str) -> bool:
    return (
        path.startswith("/v1/")
        and not path.endswith(_CLASSIFY)
        and not any(path == p or path.startswith(f"{p}/") for p in _SECRETS)
    )


def _accepts_gzip(header: str) -> bool:
    """Whether an ``Accept-Encoding`` value takes gzip: named (or ``*``, when gzip is not named)
    with a quality above 0. A malformed quality counts as 0."""
    qualities: dict[str, float] = {}
    for item in header.split(","):
        coding, *params = (part.strip() for part in item.split(";"))
        quality = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        qualities[coding.lower()] = quality
    return qualities.get("gzip", qualities.get("x-gzip", qualities.get("*", 0.0))) > 0
