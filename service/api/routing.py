"""``Router``: the APIRouter every route module uses, whose GET routes answer HEAD as well.

RFC 9110 (section 9.1) has every general-purpose server support HEAD wherever it supports GET,
and monitors and proxies use it to check a URL (a HEAD of ``/metrics`` or ``/ops/login`` was a
405). Starlette's own routes add HEAD to a GET route's methods; FastAPI's do not, and adding it
to their ``methods`` would put a HEAD operation of every GET route into the OpenAPI schema. So
a HEAD request matches a GET route here and runs it as a GET, with the reply's status and
headers and no body.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.routing import APIRoute
from starlette.routing import Match
from starlette.types import Message, Receive, Scope, Send


class GetAnswersHead(APIRoute):
    """An APIRoute that a HEAD request matches wherever a GET would."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        return super().matches(self._as_get(scope))

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        as_get = self._as_get(scope)
        if as_get is scope:
            await super().handle(scope, receive, send)
            return

        async def without_body(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await super().handle(as_get, receive, without_body)

    def _as_get(self, scope: Scope) -> Scope:
        """``scope`` as a GET if it is a HEAD this route answers, else ``scope`` itself."""
        if scope["type"] == "http" and scope["method"] == "HEAD" and "GET" in (self.methods or ()):
            return {**scope, "method": "GET"}
        return scope


class Router(APIRouter):
    """An APIRouter of :class:`GetAnswersHead` routes."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(route_class=GetAnswersHead, **kwargs)
