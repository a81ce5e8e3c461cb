"""A lean path for classify and classify_collection when what they need is in memory.

The middleware stack, routing, dependency solving and request validation cost a FastAPI app
several times the inference of one short text. The app (:class:`service.app.TaasAPI`) hands
``POST /v1/classifiers/{id}/classify`` and ``…/classify_collection``, and NLC's other form
``GET …/classify?text=``, to :class:`FastClassify` before all of that, which answers itself
when the JSON body (or the one query parameter ``text``) passes NLC's rules, the caller's
key and the classifier are in the lookup cache (:mod:`service.serving.lookup_cache`) and the model is
loaded; the call is then charged to the tenant's rate (from this replica's lease, or from
Redis on a worker thread when the lease ran out) and run on the inference batcher. Anything
else — a cache miss, a refusal, a malformed body, a model still to load — is handed, untouched
and with its body replayed, to the app's whole stack and its route, the one place that
decides errors. Nothing is charged before a hand-over (a refused rate charges nothing; the
route asks again and answers 429), so the route sees the call as if it came first hand.

The reply is the route's own (:func:`service.api.routes.classify.reply_json`); the call is
counted in the metrics under the route's template, as the metrics middleware counts the others;
an unexpected error is the app's logged 500 (:func:`service.api.errors.unexpected`).
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.parse
from typing import Protocol

from fastapi.routing import APIRoute
from pydantic import ValidationError
from starlette.datastructures import State
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api import errors
from service.api.deps import charge_classify
from service.api.routes import classify
from service.api.schemas import ClassifyCollectionInput, ClassifyInput
from service.core.errors import TaasError
from service.core.settings import Settings
from service.serving import classifying
from service.serving.lookup_cache import LookupCache
from service.serving.model_cache import ModelCache
from service.storage.store import ArtifactStore
from service.tenants.accounts import hash_key, presented_key

# How long the fast path waits for a body that its headers announced; a client that sends it
# later is the route's, whose body limit answers 408 after TAAS_BODY_IDLE_SECONDS. (The fast
# path waited without a deadline: a request of no key that declared a body and sent none held
# its socket for as long as the client kept it open.)
FIRST_CHUNK_SECONDS = 1.0
_PATH = re.compile(r"/v1/classifiers/([0-9a-f-]{36})/(classify|classify_collection)")
# Per route name: the body it takes.
_BODIES: dict[str, type[ClassifyInput | ClassifyCollectionInput]] = {
    "classify": ClassifyInput,
    "classify_collection": ClassifyCollectionInput,
}
_ROUTES = {  # the metrics label: the route's template
    name: next(r.path for r in classify.router.routes if isinstance(r, APIRoute) and r.name == name)
    for name in _BODIES
}


class RequestMetrics(Protocol):
    """Where an answered call is counted: the app's :class:`service.ops.metrics.Metrics`."""

    def observe(self, method: str, route: str, status: int, seconds: float) -> None: ...


class FastClassify:
    """The fast path of one app: ``await fast(scope, receive, send)`` for a request that
    :meth:`takes`; what it cannot answer goes to ``fallback`` (the app's whole middleware stack)."""

    def __init__(self, state: State, metrics: RequestMetrics, fallback: ASGIApp) -> None:
        self.state = state
        self.metrics = metrics
        self.fallback = fallback
        self.bodies = _BodyWatch()

    @staticmethod
    def takes(scope: Scope) -> bool:
        """Whether ``scope`` is a classify or classify_collection call of the serving version: a
        ``POST`` without a query string (``?version=`` takes the route), or a ``GET`` classify
        (whose query :func:`_query_body` reads)."""
        if scope["type"] != "http" or (match := _PATH.fullmatch(scope["path"])) is None:
            return False
        if scope["method"] == "POST":
            return not scope.get("query_string")
        return scope["method"] == "GET" and match[2] == "classify"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        match = _PATH.fullmatch(scope["path"])
        assert match is not None  # see takes()
        settings: Settings = self.state.settings
        headers = dict(reversed(scope["headers"]))  # the first of repeated headers, as Starlette
        name = match[2]
        body: classify.ClassifyBody | None
        if scope["method"] == "GET":
            body, first = _query_body(scope["query_string"]), None
        else:
            declared = headers.get(b"content-length", b"")
            if (
                not declared.isdigit()
                or int(declared) > settings.max_json_bytes
                or not _is_json(headers)
                or b"content-encoding" in headers  # the route's body limit inflates gzip
            ):
                await self.fallback(scope, receive, send)
                return
            try:
                first = await self.bodies.first_message(receive)
            except _Stalled:  # a slow or stalled body: the route times its idle (a 408)
                await self.fallback(scope, receive, send)
                return
            whole = first["type"] == "http.request" and not first.get("more_body", False)
            body = _json_body(name, first.get("body", b"")) if whole else None
        try:
            reply = None if body is None else await self._answer(scope, match[1], body, headers)
        except Exception as exc:  # as the app's own handler of the unexpected: a logged 500
            response = errors.unexpected(scope["method"], scope["path"], exc)
            await response(scope, receive, send)
            self._observe(scope["method"], name, response.status_code, started)
            return
        if reply is None:
            await self.fallback(scope, receive if first is None else _replay(first, receive), send)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(reply))],
            }
        )
        await send({"type": "http.response.body", "body": reply})
        self._observe(scope["method"], name, 200, started)

    def _observe(self, method: str, name: str, status: int, started: float) -> None:
        self.metrics.observe(method, _ROUTES[name], status, time.perf_counter() - started)

    async def _answer(
        self, scope: Scope, classifier_id: str, body: classify.ClassifyBody, headers: dict[bytes, bytes]
    ) -> bytes | None:
        state = self.state
        settings: Settings = state.settings
        try:
            texts = classify.texts_of(body, settings)
            key = presented_key(_header(headers, b"authorization"), _header(headers, b"x-api-key"))
        except TaasError:
            return None
        lookups: LookupCache = state.lookups
        found = lookups.get(hash_key(key), classifier_id) if key else None
        if found is None or found.classifier is None or found.classifier.model_dir is None:
            return None
        store: ArtifactStore = state.store
        models: ModelCache = state.models
        model = models.peek(found.tenant_id, classifier_id, store.resolve(found.classifier.model_dir))
        if model is None:
            return None
        try:
            # A refusal charges nothing, so the route may ask again to answer it.
            await charge_classify(state, found, classifying.charge_units(texts))
        except TaasError:
            return None
        answered = await models.inference.classify(model, texts)
        rate = found.classifier.out_of_scope_rate  # the tenant's, as the route's answer has it
        classified = classifying.classified(model, answered, rate)
        return classify.reply_json(Request(scope), classifier_id, body, texts, classified, state.out_of_scope)


class _Stalled(Exception):
    """The body its headers announced did not come within FIRST_CHUNK_SECONDS."""


class _BodyWatch:
    """The fast path's first body reads, each given up after FIRST_CHUNK_SECONDS by one
    watchdog task that looks every half of that: a timer a call (``asyncio.timeout``) cost a
    POST classify 15 µs of its 70 to 90 (benchmarks.md). The watchdog runs while reads are
    waiting and ends when none is."""

    def __init__(self) -> None:
        self._reads: dict[asyncio.Task[object], float] = {}  # a read's task -> its deadline
        self._overdue: set[asyncio.Task[object]] = set()
        self._watchdog: asyncio.Task[None] | None = None

    async def first_message(self, receive: Receive) -> Message:
        """``await receive()``, or _Stalled when it has not answered in FIRST_CHUNK_SECONDS."""
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        self._reads[task] = loop.time() + FIRST_CHUNK_SECONDS
        if self._watchdog is None or self._watchdog.done():
            self._watchdog = loop.create_task(self._watch())
        try:
            return await receive()
        except asyncio.CancelledError:
            if task not in self._overdue:
                raise
            task.uncancel()  # the watchdog's cancel, not the server's: the route takes over
            raise _Stalled from None
        finally:
            self._reads.pop(task, None)
            self._overdue.discard(task)

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        while self._reads:
            await asyncio.sleep(FIRST_CHUNK_SECONDS / 2)
            now = loop.time()
            # a read listed here waits in its receive(): the cancel lands there, in its except
            for task, deadline in list(self._reads.items()):
                if deadline <= now and task not in self._overdue:
                    self._overdue.add(task)
                    task.cancel()


def _json_body(name: str, raw: bytes) -> classify.ClassifyBody | None:
    """The body of a ``POST`` to route ``name``, or None where it is not one (the route says why)."""
    try:
        return _BODIES[name].model_validate_json(raw)
    except ValidationError:
        return None


def _query_body(query_string: bytes) -> ClassifyInput | None:
    """The text of a ``GET …/classify?text=`` as the JSON body it stands for, or None unless
    ``text`` is the query's one parameter and holds no U+FFFD. Decoded as Starlette decodes a
    query."""
    pairs = urllib.parse.parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)
    if len(pairs) != 1 or pairs[0][0] != "text" or "\ufffd" in pairs[0][1]:
        return None  # the route answers: other parameters, or escapes that may not be UTF-8
    return ClassifyInput(text=pairs[0][1])


def _is_json(headers: dict[bytes, bytes]) -> bool:
    return headers.get(b"content-type", b"").partition(b";")[0].strip().lower() == b"application/json"


def _header(headers: dict[bytes, bytes], name: bytes) -> str | None:
    value = headers.get(name)
    return None if value is None else value.decode("latin-1")


def _replay(first: Message, receive: Receive) -> Receive:
    """``receive`` with the message already taken put back in front."""
    replayed = False

    async def replaying() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return first

    return replaying
