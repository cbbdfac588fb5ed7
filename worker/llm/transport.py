"""The LLM client's I/O: one event loop per client in a daemon thread, and the HTTP seam.

Every request of the process runs as a coroutine on one loop (``EventLoopThread``):
an in-flight request costs a coroutine and a socket, not a thread, so one process
can keep hundreds of requests in flight on a fraction of a core. Synchronous
callers (a Celery ``threads`` worker, the Python API, the health poller) hand
coroutines to the loop with ``asyncio.run_coroutine_threadsafe``.

The HTTP itself is behind ``Transport``:

* ``AiohttpTransport`` (the default): one ``aiohttp.ClientSession`` with its own
  ``TCPConnector`` per endpoint, its connection limit taken from the in-flight
  settings. Measured on 2 cores against the simulator (bench/perf/saturation.py),
  aiohttp spent ~0.25 ms of client CPU per request where ``httpx.AsyncClient``
  (httpcore's async pool) spent several times more, and the thread-per-request
  client ~1.7–3.7 ms.
* ``HttpxTransport``: an ``httpx.AsyncClient`` over any httpx transport, so unit
  tests replay canned replies with ``httpx.MockTransport`` (httpx's own seam).

A transport turns its library's failures into ``TransportFailure`` with a kind
(connect, timeout, dropped, failed); the client maps the kind to qfarm's error
classes, so the retry rules never depend on which HTTP library ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
from collections.abc import AsyncIterator, Coroutine, Mapping
from concurrent.futures import Future
from typing import Any, Literal, Protocol, TypeVar
from urllib.parse import urlsplit

import aiohttp
import httpx

T = TypeVar("T")
FailureKind = Literal["connect", "timeout", "dropped", "failed"]


class TransportFailure(Exception):
    """A request that got no HTTP response (or lost it midway), by kind."""

    def __init__(self, kind: FailureKind, detail: str, cause: str):
        super().__init__(detail)
        self.kind = kind
        self.cause = cause  # the library's exception class name, for the message


class Response(Protocol):
    status: int
    reason: str
    headers: Mapping[str, str]  # case-insensitive in both implementations

    async def read(self, limit: int | None = None) -> bytes:
        """The body; past ``limit`` bytes, ``ReplyTooLarge`` and nothing more is read."""
        ...

    def lines(self, limit: int | None = None) -> AsyncIterator[bytes]:
        """The body line by line; past ``limit`` bytes in all, ``ReplyTooLarge`` (a line
        without an end is not read whole first)."""
        ...


class ReplyTooLarge(Exception):
    """A body past the reader's limit (the client turns it into ``OversizedReplyError``)."""

    def __init__(self, limit: int):
        super().__init__(f"more than {limit:,} bytes")
        self.limit = limit


async def read_bounded(chunks: AsyncIterator[bytes], limit: int | None) -> bytes:
    """Join ``chunks``, raising ``ReplyTooLarge`` as soon as they pass ``limit`` bytes."""
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if limit is not None and size > limit:
            raise ReplyTooLarge(limit)
        parts.append(chunk)
    return b"".join(parts)


async def split_lines(chunks: AsyncIterator[bytes], limit: int | None) -> AsyncIterator[bytes]:
    """``chunks`` as lines (each with its ``\n``), ``ReplyTooLarge`` past ``limit`` bytes."""
    pending = b""
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if limit is not None and size > limit:
            raise ReplyTooLarge(limit)
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for line in complete:
            yield line + b"\n"
    if pending:
        yield pending


class Transport(Protocol):
    def request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str],
        body: bytes | None = None,
        timeout_s: float | None = None,
    ) -> contextlib.AbstractAsyncContextManager[Response]: ...

    async def close(self) -> None: ...


def request_headers(headers: Mapping[str, str], body: bytes | None) -> dict[str, str]:
    """``headers`` plus the JSON content type when there is a body (every body here is JSON)."""
    return {**headers, "Content-Type": "application/json"} if body is not None else dict(headers)


class EventLoopThread:
    """An asyncio loop running forever in a daemon thread; ``stop`` ends it."""

    def __init__(self, name: str = "qfarm-llm-loop"):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @property
    def thread_id(self) -> int | None:
        return self._thread.ident

    def in_loop(self) -> bool:
        return threading.get_ident() == self._thread.ident

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for it (never from the loop's own thread)."""
        if self.in_loop():
            coro.close()
            raise RuntimeError("a blocking LLM call was made on the gateway's event loop")
        return self.submit(coro).result()

    def call_soon(self, fn: Any, *args: Any) -> bool:
        """Schedule ``fn`` on the loop from any thread (directly when already on it);
        False when the loop is closed and ``fn`` will never run."""
        if self.in_loop():
            fn(*args)
            return True
        if self.loop.is_closed():
            return False
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop closed meanwhile
            return False
        return True

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5.0)
        if not self._thread.is_alive():
            self.loop.close()


# --------------------------------------------------------------------------- aiohttp


class _AiohttpResponse:
    def __init__(self, resp: aiohttp.ClientResponse):
        self._resp = resp
        self.status = resp.status
        self.reason = resp.reason or ""
        self.headers: Mapping[str, str] = resp.headers

    async def read(self, limit: int | None = None) -> bytes:
        return await read_bounded(self._resp.content.iter_chunked(1 << 16), limit)

    async def lines(self, limit: int | None = None) -> AsyncIterator[bytes]:
        async for line in split_lines(self._resp.content.iter_any(), limit):
            yield line


def _aiohttp_failure(exc: BaseException) -> TransportFailure:
    kind: FailureKind
    if isinstance(exc, aiohttp.ConnectionTimeoutError | aiohttp.ClientConnectorError):
        kind = "connect"
    elif isinstance(exc, TimeoutError | aiohttp.ServerTimeoutError):
        kind = "timeout"
    elif isinstance(
        exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError | aiohttp.ClientOSError
    ):
        kind = "dropped"
    else:
        kind = "failed"
    return TransportFailure(kind, str(exc) or type(exc).__name__, type(exc).__name__)


class AiohttpTransport:
    """One ``ClientSession`` (own connector and keep-alive pool) per endpoint origin."""

    def __init__(self, *, timeout_s: float, connect_timeout_s: float, max_connections: int):
        # httpx's semantics, kept: the timeout bounds each wait for bytes, not the whole
        # request (a long answer that keeps streaming is not cut off).
        self._timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=connect_timeout_s, sock_read=timeout_s
        )
        self._limit = max(1, max_connections)
        self._sessions: dict[str, aiohttp.ClientSession] = {}
        # Made once, and only for an https endpoint: building one costs ~20 ms.
        self._ssl: ssl.SSLContext | None = None

    def _session(self, url: str) -> aiohttp.ClientSession:
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        session = self._sessions.get(origin)
        if session is None:
            tls: ssl.SSLContext | bool = True  # plain http: the context is never used
            if parts.scheme == "https":
                if self._ssl is None:
                    self._ssl = ssl.create_default_context()
                tls = self._ssl
            connector = aiohttp.TCPConnector(
                limit=self._limit, limit_per_host=self._limit, ssl=tls
            )
            session = aiohttp.ClientSession(
                connector=connector, timeout=self._timeout, auto_decompress=True
            )
            self._sessions[origin] = session
        return session

    @contextlib.asynccontextmanager
    async def request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str],
        body: bytes | None = None,
        timeout_s: float | None = None,
    ) -> AsyncIterator[Response]:
        timeout = self._timeout if timeout_s is None else aiohttp.ClientTimeout(total=timeout_s)
        hdrs = request_headers(headers, body)
        try:
            async with self._session(url).request(
                method, url, data=body, headers=hdrs, timeout=timeout, allow_redirects=False
            ) as resp:
                yield _AiohttpResponse(resp)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _aiohttp_failure(exc) from exc

    async def close(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            await session.close()


# --------------------------------------------------------------------------- httpx (tests)


class _HttpxResponse:
    def __init__(self, resp: httpx.Response):
        self._resp = resp
        self.status = resp.status_code
        self.reason = resp.reason_phrase
        self.headers: Mapping[str, str] = resp.headers

    async def read(self, limit: int | None = None) -> bytes:
        return await read_bounded(self._resp.aiter_bytes(), limit)

    async def lines(self, limit: int | None = None) -> AsyncIterator[bytes]:
        async for line in split_lines(self._resp.aiter_bytes(), limit):
            yield line


def _httpx_failure(exc: httpx.HTTPError) -> TransportFailure:
    kind: FailureKind
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        kind = "connect"
    elif isinstance(exc, httpx.TimeoutException):
        kind = "timeout"
    elif isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError):
        kind = "dropped"
    else:
        kind = "failed"
    return TransportFailure(kind, str(exc), type(exc).__name__)


class HttpxTransport:
    """``httpx.AsyncClient`` over a given httpx transport (``httpx.MockTransport`` in tests)."""

    def __init__(
        self,
        transport: httpx.AsyncBaseTransport,
        *,
        timeout_s: float,
        connect_timeout_s: float,
        max_connections: int,
    ):
        self._client = httpx.AsyncClient(
            transport=transport,
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s, pool=timeout_s),
            limits=httpx.Limits(max_connections=max(1, max_connections)),
            follow_redirects=False,
        )

    @contextlib.asynccontextmanager
    async def request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str],
        body: bytes | None = None,
        timeout_s: float | None = None,
    ) -> AsyncIterator[Response]:
        hdrs = request_headers(headers, body)
        kwargs: dict[str, Any] = {"headers": hdrs, "content": body}
        if timeout_s is not None:
            kwargs["timeout"] = timeout_s
        try:
            async with self._client.stream(method, url, **kwargs) as resp:
                yield _HttpxResponse(resp)
        except httpx.HTTPError as exc:
            raise _httpx_failure(exc) from exc

    async def close(self) -> None:
        await self._client.aclose()
