"""Request bodies read as streams: the upload limit is enforced while bytes arrive.

A body is never held whole in memory: ``Content-Length`` is checked up front, bytes are
counted as they stream in, and multipart parts that carry data are spooled to files in the
store's staging area (parsed with python-multipart's streaming parser, whether or not a part
has a file name — the ibm-watson SDK sends none). The caller removes the files with
:meth:`Upload.discard`, whatever happens.
"""

from __future__ import annotations

import asyncio
import json
import re
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from python_multipart.exceptions import FormParserError, MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.catalogue.datasets import STORE_REFUSED
from service.core.errors import (
    BadRequest,
    PayloadTooLarge,
    RequestTimeout,
    TaasError,
    UnsupportedMediaType,
    unavailable,
)
from service.tenants.staging import Staging

SMALL_PART_BYTES = 64 * 1024  # metadata and name fields
MAX_PARTS = 16
RAW_BODY = "body"  # the name under which a non-multipart body is spooled


@dataclass
class Upload:
    """A received body: small fields in memory, data parts as spooled files."""

    fields: dict[str, bytes] = field(default_factory=dict)
    files: dict[str, Path] = field(default_factory=dict)

    def discard(self) -> None:
        """Remove every spooled file."""
        for path in self.files.values():
            path.unlink(missing_ok=True)
        self.files.clear()


async def read_upload(request: Request, staging: Staging, limit: int, spool: frozenset[str]) -> Upload:
    """Receive a multipart body (parts named in ``spool`` go to files) or a raw body (to
    ``files[RAW_BODY]``), spooled in the tenant's staging (:mod:`service.tenants.staging`).
    PayloadTooLarge over ``limit`` bytes; BadRequest on a malformed body; StagingOverQuota once
    the tenant's stored and staged bytes are over its ``dataset_bytes`` quota (checked as every
    mebibyte arrives and at the end)."""
    upload = Upload()
    try:
        content_type, params = parse_options_header(request.headers.get("content-type", ""))
        stream = _checked_stream(_limited_stream(request, limit), staging)
        if content_type == b"multipart/form-data":
            await _read_multipart(stream, staging, spool, params.get(b"boundary", b""), upload)
        else:
            path = upload.files[RAW_BODY] = staging.path()
            with open(path, "wb") as out:
                async for chunk in stream:
                    out.write(chunk)
        staging.check()
    except OSError as exc:  # the staging folder's disk is full, say: a 500 before
        upload.discard()
        raise unavailable(STORE_REFUSED, exc) from exc
    except BaseException:
        upload.discard()
        raise
    return upload


async def read_json(request: Request, limit: int = SMALL_PART_BYTES) -> object:
    """A small JSON body; PayloadTooLarge over ``limit``, BadRequest if it is not JSON."""
    body = bytearray()
    async for chunk in _limited_stream(request, limit):
        body += chunk
    try:
        return json.loads(body)
    except ValueError as exc:  # not JSON, not UTF-8, or an integer past Python's 4,300 digits
        raise BadRequest("body", f"not valid JSON ({exc})") from None
    except RecursionError:
        raise BadRequest("body", "JSON nested too deeply") from None


def is_training_json(request: Request) -> bool:
    """For a route that trains (a create, a new version): whether the body is JSON naming a
    dataset (True) or NLC's multipart upload (False). Any other body is refused before it is
    read: a CSV sent whole was spooled, then refused for lacking a multipart part."""
    content_type, _ = parse_options_header(request.headers.get("content-type", ""))
    if content_type in (b"application/json", b"multipart/form-data"):
        return content_type == b"application/json"
    raise BadRequest(
        "Content-Type",
        f"{content_type.decode('latin-1')!r} is not taken here: send multipart/form-data (NLC's"
        " training_data part, and training_metadata) or application/json naming a dataset_id; a"
        " labelled CSV or JSON Lines body is stored by POST /v1/datasets",
    )


async def _limited_stream(request: Request, limit: int) -> AsyncIterator[bytes]:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(limit)
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > limit:
            raise PayloadTooLarge(limit)
        yield chunk


_CHECK_EVERY_BYTES = 1 << 20  # how often a streaming upload's staged bytes are counted


async def _checked_stream(chunks: AsyncIterator[bytes], staging: Staging) -> AsyncIterator[bytes]:
    """``chunks``, with the tenant's staged bytes checked against its quota before each further
    mebibyte (the previous one written by then)."""
    since_check = 0
    async for chunk in chunks:
        since_check += len(chunk)
        if since_check >= _CHECK_EVERY_BYTES:
            since_check = 0
            staging.check()
        yield chunk


class _Part:
    def __init__(self) -> None:
        self.header_name = bytearray()
        self.header_value = bytearray()
        self.name = ""
        self.sink: IO[bytes] | None = None
        self.buffer: bytearray | None = None


async def _read_multipart(
    stream: AsyncIterator[bytes], staging: Staging, spool: frozenset[str], boundary: bytes, upload: Upload
) -> None:
    if not boundary:
        raise BadRequest("body", "multipart body without a boundary")
    part = _Part()
    parts = 0

    def on_part_begin() -> None:
        nonlocal part, parts
        parts += 1
        if parts > MAX_PARTS:
            raise BadRequest("body", f"more than {MAX_PARTS} multipart parts")
        part = _Part()

    def on_header_field(data: bytes, start: int, end: int) -> None:
        part.header_name += data[start:end]

    def on_header_value(data: bytes, start: int, end: int) -> None:
        part.header_value += data[start:end]

    def on_header_end() -> None:
        if part.header_name.lower() == b"content-disposition":
            _, params = parse_options_header(bytes(part.header_value))
            part.name = params.get(b"name", b"").decode("utf-8", "replace")
        part.header_name.clear()
        part.header_value.clear()

    def on_headers_finished() -> None:
        if part.name in upload.files or part.name in upload.fields:
            raise BadRequest("body", f"multipart part '{part.name}' appears twice; send each part once")
        if part.name in spool:
            path = upload.files[part.name] = staging.path()
            part.sink = open(path, "wb")  # noqa: SIM115 - closed in on_part_end or below
        else:
            part.buffer = bytearray()

    def on_part_data(data: bytes, start: int, end: int) -> None:
        if part.sink is not None:
            part.sink.write(data[start:end])
        elif part.buffer is not None:
            part.buffer += data[start:end]
            if len(part.buffer) > SMALL_PART_BYTES:
                raise BadRequest(part.name, f"field is over {SMALL_PART_BYTES} bytes")

    def on_part_end() -> None:
        if part.sink is not None:
            part.sink.close()
        elif part.buffer is not None:
            upload.fields[part.name] = bytes(part.buffer)

    ended = False

    def on_end() -> None:  # the closing boundary: without it the last part may be cut short
        nonlocal ended
        ended = True

    try:
        parser = MultipartParser(
            boundary,
            {
                "on_part_begin": on_part_begin,
                "on_header_field": on_header_field,
                "on_header_value": on_header_value,
                "on_header_end": on_header_end,
                "on_headers_finished": on_headers_finished,
                "on_part_data": on_part_data,
                "on_part_end": on_part_end,
                "on_end": on_end,
            },
        )
        async for chunk in stream:
            parser.write(chunk)
        parser.finalize()
    except (MultipartParseError, FormParserError) as exc:  # the latter: a boundary over 256 bytes
        raise BadRequest("body", f"malformed multipart body ({exc})") from None
    finally:
        if part.sink is not None and not part.sink.closed:
            part.sink.close()
    if not ended:
        raise BadRequest("body", "the multipart body ends before its closing boundary: it was cut short")


class BodyLimit:
    """ASGI middleware: every request body has a limit, checked on ``Content-Length`` before the
    app runs and counted while it streams. Upload routes (POST to a path that ``upload_paths``
    matches whole) may send ``upload_bytes``; every other route, whose bodies are small JSON,
    ``json_bytes``. A body that sends nothing for ``idle_seconds`` is refused (408): a stalled
    upload would otherwise hold its socket, staging file and request forever.

    A body sent with ``Content-Encoding: gzip`` (the IBM SDK's ``set_enable_gzip_compression``)
    is inflated here, a bounded piece at a time, and the limit counts what it inflates to (a
    gzip bomb stops at the limit plus a byte); any other coding is a 415 naming it. The routes
    see the plain body, without the coding's headers."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        upload_bytes: int,
        json_bytes: int,
        upload_paths: re.Pattern[str],
        idle_seconds: float,
    ) -> None:
        self.app = app
        self.upload_bytes, self.json_bytes, self.upload_paths = upload_bytes, json_bytes, upload_paths
        self.idle_seconds = idle_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"].rstrip("/")
        is_upload = scope["method"] == "POST" and self.upload_paths.fullmatch(path) is not None
        limit = self.upload_bytes if is_upload else self.json_bytes
        declared = _content_length(scope)
        coding = _content_coding(scope)
        refused: TaasError | None = None
        if declared is not None and declared > limit:
            refused = PayloadTooLarge(limit)
        elif coding not in ("", "identity", "gzip", "x-gzip"):
            refused = UnsupportedMediaType(
                f"Content-Encoding {coding!r} is not read here: send the body as it is, or gzipped"
            )
        if refused is not None:  # before the body is read: the connection goes with the reply
            body = {"code": refused.status, "error": refused.title, "description": str(refused)}
            await JSONResponse(body, status_code=refused.status, headers={"Connection": "close"})(
                scope, receive, send
            )
            return
        inflate = _Inflater(limit) if coding in ("gzip", "x-gzip") else None
        if inflate is not None:
            dropped = (b"content-encoding", b"content-length")
            scope = {**scope, "headers": [(k, v) for k, v in scope["headers"] if k not in dropped]}
        received, complete = 0, False

        async def limited() -> Message:
            nonlocal received, complete
            if complete:  # after the body, a receive waits for the client to leave: no deadline
                return await receive()
            try:
                async with asyncio.timeout(self.idle_seconds):
                    message = await receive()
            except TimeoutError:
                raise RequestTimeout(self.idle_seconds) from None
            if message["type"] == "http.request":
                complete = not message.get("more_body", False)
                if inflate is not None:
                    message = {**message, "body": inflate.feed(message.get("body", b""), last=complete)}
                received += len(message.get("body", b""))
                if received > limit:
                    raise PayloadTooLarge(limit)
            return message

        async def unread() -> Message:
            # No GET, HEAD or DELETE route reads a body; a file download still receives, to see
            # the client leave, once its reply has begun. A body sent with one is dropped
            # unchecked: checked, a bad one (gzip cut short, over the limit, stalled) raised into
            # the download and was a logged 500 with the reply cut short.
            message = await receive()
            return {**message, "body": b""} if message["type"] == "http.request" else message

        await self.app(scope, limited if scope["method"] not in _BODILESS else unread, send)


_BODILESS = frozenset({"GET", "HEAD", "DELETE", "OPTIONS"})  # methods whose routes read no body


class _Inflater:
    """A gzip body inflated piece by piece, never more than ``limit`` + 1 bytes in all (more is
    a PayloadTooLarge for the caller to raise: it counts what this returns). The gzipped bytes
    are bounded by the limit too: a chunked body of a header that never ends, or of empty
    blocks, inflates to nothing for ever. One gzip member, nothing after it (``cat a.gz b.gz``
    would have been read as a.gz alone)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.out = self.took = 0
        self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)

    def feed(self, data: bytes, *, last: bool) -> bytes:
        self.took += len(data)
        if self.took > self.limit:
            raise PayloadTooLarge(self.limit)
        try:
            plain = self._inflate.decompress(data, self.limit + 1 - self.out)
        except zlib.error as exc:
            raise BadRequest("body", f"not valid gzip ({exc})") from None
        self.out += len(plain)
        if self.out > self.limit:
            return plain
        if self._inflate.eof and self._inflate.unused_data:
            raise BadRequest("body", "bytes follow the gzip stream: send one gzip member")
        if last and not self._inflate.eof:
            raise BadRequest("body", "the gzip body ends before its end: it was cut short")
        return plain


def _content_coding(scope: Scope) -> str:
    return _first_header(scope, b"content-encoding").decode("latin-1").strip().lower()


def _content_length(scope: Scope) -> int | None:
    value = _first_header(scope, b"content-length")
    return int(value) if value.isdigit() else None


def _first_header(scope: Scope, wanted: bytes) -> bytes:
    """The first value of header ``wanted`` (b"" when absent)."""
    return next((value for name, value in scope["headers"] if name == wanted), b"")
