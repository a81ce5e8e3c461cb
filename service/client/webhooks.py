"""Webhook signatures, for receivers of taas status events (standard library only).

taas signs each delivery with the tenant's webhook secret, as Stripe and GitHub do::

    X-Taas-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>

A receiver checks it with :func:`verify` on the raw body bytes (before parsing the JSON), which
also refuses a replayed delivery whose timestamp is older than ``tolerance`` seconds; it then
dedupes on the event's ``id``, which is the same on every retry::

    from service.client.webhooks import InvalidSignature, verify

    try:
        verify(secret, body, request.headers["X-Taas-Signature"])
    except InvalidSignature:
        return 400
"""

from __future__ import annotations

import hashlib
import hmac
import time

SIGNATURE_HEADER = "X-Taas-Signature"
EVENT_ID_HEADER = "X-Taas-Event-Id"
DEFAULT_TOLERANCE_SECONDS = 300


class InvalidSignature(ValueError):
    """The signature header is missing, malformed, wrong, or too old (a replay)."""


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """The :data:`SIGNATURE_HEADER` value for ``body`` sent at ``timestamp`` (unix seconds)."""
    return f"t={timestamp},v1={_digest(secret, body, timestamp)}"


def verify(
    secret: str,
    body: bytes,
    header: str | None,
    *,
    tolerance: float = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> int:
    """Check a delivery's :data:`SIGNATURE_HEADER`; returns its timestamp.

    Raises InvalidSignature unless one of its ``v1`` signatures is the HMAC of ``body`` under
    ``secret`` and its timestamp is within ``tolerance`` seconds of ``now`` (default: the clock).
    """
    fields: dict[str, list[str]] = {}
    for part in (header or "").split(","):
        key, _, value = part.strip().partition("=")
        fields.setdefault(key, []).append(value)
    stamps = fields.get("t", [])
    # what sign writes: ASCII digits (int() also takes "+1", "1_0", other scripts' digits, and
    # 320 of them overflowed the float subtraction below: an OverflowError, not InvalidSignature)
    if len(stamps) != 1 or not (stamps[0].isascii() and stamps[0].isdigit() and len(stamps[0]) <= 12):
        raise InvalidSignature(f"{SIGNATURE_HEADER} has no single timestamp t= of at most 12 digits")
    timestamp = int(stamps[0])
    if abs((time.time() if now is None else now) - timestamp) > tolerance:
        raise InvalidSignature(f"the timestamp is more than {tolerance:g} s from now (a replay?)")
    expected = _digest(secret, body, timestamp)
    # bytes: compare_digest raises TypeError on a str with non-ASCII characters, which any sender can put here
    given = [v.encode("utf-8", "surrogatepass") for v in fields.get("v1", [])]
    if not any(hmac.compare_digest(expected.encode(), v1) for v1 in given):
        raise InvalidSignature("no v1 signature matches the body under this secret")
    return timestamp


def _digest(secret: str, body: bytes, timestamp: int) -> str:
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
