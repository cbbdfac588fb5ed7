"""ASGI middleware of the API: body size limit, token check of the schema pages, request
counts for /metrics."""

from __future__ import annotations

import http.cookies
from typing import Any

from qfarm.producer.http import auth
from qfarm.producer.http.errors import ApiError, problem

DOC_PATHS = ("/openapi.json", "/docs", "/redoc", "/docs/oauth2-redirect")


class BodyLimit:
    """ASGI middleware: request bodies over ``limit`` bytes get a 413, whether announced
    by Content-Length (refused before reading) or chunked (refused once the count passes
    the limit while the route reads); also counts requests per route for /metrics."""

    def __init__(self, app: Any, limit: int, collector: Any, tokens: auth.Tokens) -> None:
        self.app, self.limit, self.collector, self.tokens = app, limit, collector, tokens

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        if scope["path"] in DOC_PATHS and not self._may_read_docs(headers):
            await problem(401, "the API's schema needs a token too (a bearer header, or the "
                                "viewer's cookie: open /?token=TOKEN first)")(scope, receive, send)
            return
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            resp = problem(413, f"request body of {int(length)} bytes; at most {self.limit} "
                                 "(QFARM_API_MAX_BODY_BYTES)")
            await resp(scope, receive, send)
            self._count(scope, 413)
            return
        seen = 0
        status = [500]

        async def limited() -> Any:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise ApiError(413, f"request body over {self.limit} bytes "
                                        "(QFARM_API_MAX_BODY_BYTES)")
            return message

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        await self.app(scope, limited, sending)
        self._count(scope, status[0])

    def _may_read_docs(self, headers: dict[bytes, bytes]) -> bool:
        if not self.tokens.required:
            return True
        presented = auth.bearer(headers.get(b"authorization", b"").decode(errors="replace"))
        if presented is None:
            cookies = http.cookies.SimpleCookie(headers.get(b"cookie", b"").decode(errors="replace"))
            morsel = cookies.get(auth.COOKIE)
            presented = morsel.value if morsel else None
        return self.tokens.scope_of(presented) is not None

    def _count(self, scope: dict[str, Any], status: int) -> None:
        if self.collector is not None:
            route = scope.get("route")
            self.collector.count_request(getattr(route, "path", "other"), status)
