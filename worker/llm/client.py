"""HTTP to OpenAI-compatible endpoints: async requests on one event loop, no retries.

This layer sends one request and translates what comes back into either a
``Reply`` (choices mapped by their ``index``, never by position) or one of the
LLM failure classes of ``qfarm.common.errors`` (a kind is a type: ``LLMConnectError``,
``BackPressureError``, ``ContextOverflowError``…) carrying the endpoint and job id.
It never retries (``retry.py`` and the gateway own that) and never puts an API
key in a message: keys travel only in the ``Authorization`` header of each
request, and any text taken from a server is passed through ``redact``.

The client owns the process's LLM event loop (``transport.EventLoopThread``):
``acomplete`` and the ``a*`` probes are coroutines for that loop (the gateway's
retry loop runs there), ``complete`` and the probes without the ``a`` are their
blocking forms for any other thread. The HTTP goes through a ``Transport``:
aiohttp sessions by default, or an ``httpx`` transport when one is given (tests
use ``httpx.MockTransport``; integration tests use the simulator over real HTTP).
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import time
from collections.abc import Coroutine, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import httpx

from qfarm.common.errors import (
    BackPressureError,
    ContextOverflowError,
    LLMConnectError,
    LLMDroppedError,
    LLMTimeoutError,
    MalformedReplyError,
    OversizedReplyError,
    PermanentStatusError,
    QueueFullError,
    TransientServiceError,
    TransientStatusError,
)
from qfarm.common.models import Sampling, Usage
from qfarm.common.urls import redact_url
from qfarm.common.vocab import SIMULATOR_HEADER
from qfarm.worker.llm.retry import DEFAULT_RETRY_AFTER_MAX_S, is_transient_status, parse_retry_after
from qfarm.worker.llm.transport import (
    AiohttpTransport,
    EventLoopThread,
    HttpxTransport,
    ReplyTooLarge,
    Response,
    Transport,
    TransportFailure,
)

T = TypeVar("T")

BODY_EXCERPT_CHARS = 300
METRIC_NAMES = ("vllm:num_requests_running", "vllm:num_requests_waiting")
# vLLM's admission control (--max-num-queued-reqs / --max-num-queued-tokens) answers 503 with
# error.type "Service Unavailable" and one of these messages (vllm/exceptions.py,
# QueueOverflowError and MaxQueuedTokensError): a live server pushing back, not a dead one.
OVERLOAD_TYPE = "Service Unavailable"
OVERLOAD_MARKERS = ("cannot accept new requests", "prefill token backlog limit")
FINISHED_OK = frozenset({"stop", "length"})
HEALTH_PATH = "/health"
MODELS_PATH = "/v1/models"
LLAMA_CPP_PYTHON_TITLE = "llama.cpp Python API"
VLLM, LLAMA_CPP = "vllm", "llama.cpp"  # request dialects: where a grammar goes (build_body)
# vLLM's request "priority" (lower is served earlier; 0 is vLLM's default): a single
# question's request goes ahead of a sweep's at a server started with
# --scheduling-policy priority. A sweep takes the number above the default, so it also
# yields to other clients of a shared server that send none.
INTERACTIVE_PRIORITY, SWEEP_PRIORITY = 0, 1
# llama-cpp-python's server answers a request it cannot parse (a parameter out of range) with
# a 500 carrying pydantic's message ("1 validation error: ..."), not a 400/422: the same
# request can never succeed, so it is permanent, not a server failure to retry.
VALIDATION_ERROR_RE = re.compile(r"^\d+ validation errors?\b")


@dataclass(frozen=True)
class MetricsScrape:
    """One ``/metrics`` read: the gauges, or why there are none."""

    values: dict[str, float] | None
    problem: str | None = None  # None: values present


@dataclass(frozen=True)
class Probe:
    """One liveness probe: the status, or the transport failure's kind."""

    path: str
    status: int | None = None
    failure: str | None = None  # "connect", "timeout", "dropped"

    @property
    def ok(self) -> bool:
        return self.status == 200

    @property
    def reason(self) -> str:
        if self.status is not None:
            return f"{self.path} answered {self.status}"
        return f"{self.path} {'timed out' if self.failure == 'timeout' else 'unreachable'}"


@dataclass(frozen=True)
class ServerInfo:
    """A server that is not vLLM, recognised by what it serves (``LLMClient.aserver_info``)."""

    name: str
    one_slot: bool  # answers one request at a time; others wait in its queue
    dialect: str = VLLM  # which request fields it reads (``build_body``)


def server_info_from_openapi(payload: Any) -> ServerInfo | None:
    """A recognised server from its ``/openapi.json`` (None: vLLM or not recognised)."""
    info = payload.get("info") if isinstance(payload, dict) else None
    if not isinstance(info, dict) or LLAMA_CPP_PYTHON_TITLE not in str(info.get("title") or ""):
        return None
    version = str(info.get("version") or "unknown")
    return ServerInfo(name=f"llama.cpp server (llama-cpp-python {version})", one_slot=True,
                      dialect=LLAMA_CPP)


@dataclass(frozen=True)
class Target:
    """An endpoint as the client needs it; the key never shows in ``repr``."""

    url: str
    api_key: str | None = field(default=None, repr=False)
    dialect: str = VLLM  # llama.cpp once the server says it is (pool.py, _recognise)
    # Send vLLM's "priority" field (QFARM_LLM_PRIORITY): only a server started with
    # --scheduling-policy priority orders by it, and some vLLM releases refuse it otherwise.
    priority: bool = False

    @property
    def display(self) -> str:
        return display_url(self.url)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


@dataclass(frozen=True)
class Choice:
    index: int
    text: str
    finish_reason: str | None


@dataclass(frozen=True)
class Reply:
    """One successful response: choices by index, usage summed over the request."""

    choices: dict[int, Choice]
    usage: Usage
    simulated: bool
    elapsed_ms: float
    ttft_ms: float | None = None
    sent_at: float | None = None  # epoch seconds the request was sent


@functools.lru_cache(maxsize=256)
def display_url(url: str) -> str:
    """The URL with any password replaced by *** (the farm's one redactor), for messages and
    rows. Remembered: every request names its endpoint several times (its row, its log
    lines, its metrics), and parsing the URL again each time was a twentieth of the
    gateway loop's CPU in an eager sweep."""
    return redact_url(url)


def redact(text: str, secrets: Iterable[str | None]) -> str:
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return text


# What a reply may be. A token is a few characters, and a character at most 6 bytes of JSON
# (\uXXXX); 128 bytes a token covers any honest reply with room to spare, and a server that
# sends more (a 50 MB "answer") is cut off there instead of filling the worker's memory.
REPLY_BYTES_PER_TOKEN = 128
REPLY_BASE_BYTES = 1 << 20  # the envelope: ids, usage, headers of each choice, stream framing
ERROR_BODY_BYTES = 1 << 20  # an error's body: only its message is read
PROBE_BODY_BYTES = 8 << 20  # /v1/models, /metrics
# A count a server reports about itself beyond this is not believed (1e30 tokens, -500).
MAX_REPORTED_TOKENS = 10_000_000


def reply_limit(n_prompts: int, sampling: Sampling) -> int:
    """The most bytes a reply to ``n_prompts`` prompts under ``sampling`` may take."""
    return REPLY_BASE_BYTES + n_prompts * sampling.n * sampling.max_tokens * REPLY_BYTES_PER_TOKEN


def build_body(
    model: str,
    prompts: Sequence[str],
    sampling: Sampling,
    *,
    stream: bool,
    dialect: str = VLLM,
    priority: bool = False,
) -> dict[str, Any]:
    """Every sampling parameter pinned in the request, so server defaults never leak in.

    ``top_p`` is pinned to 1.0 because a server started without
    ``--generation-config vllm`` would otherwise apply the model's own
    generation_config (Llama 3.1 ships top_p 0.9).

    The answer's grammar goes where the server reads it: vLLM takes it in
    ``structured_outputs`` (``StructuredOutputsParams.grammar``); llama.cpp's server
    reads a top-level ``grammar`` on ``/v1/completions`` (``CreateCompletionRequest``)
    and would ignore vLLM's field, as vLLM ignores llama.cpp's.

    With ``priority`` (and the vLLM dialect) the body carries vLLM's ``priority``:
    ``INTERACTIVE_PRIORITY`` for a single question's request, ``SWEEP_PRIORITY`` otherwise.
    """
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompts[0] if len(prompts) == 1 else list(prompts),
        "temperature": sampling.temperature,
        "top_p": 1.0,
        "max_tokens": sampling.max_tokens,
        "seed": sampling.seed,
        "stop": list(sampling.stop),
        "n": sampling.n,
    }
    if sampling.grammar is not None:
        if dialect == LLAMA_CPP:
            body["grammar"] = sampling.grammar
        else:
            body["structured_outputs"] = {"grammar": sampling.grammar}
    if priority and dialect == VLLM:
        body["priority"] = INTERACTIVE_PRIORITY if sampling.interactive else SWEEP_PRIORITY
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def parse_prometheus(text: str, names: Sequence[str] = METRIC_NAMES) -> dict[str, float]:
    """Sum each named series over its labels (one value per metric name)."""
    out: dict[str, float] = {}
    wanted = set(names)
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in wanted:
            try:
                out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
            except (ValueError, IndexError):
                continue
    return out


def _error_message(resp_text: str) -> tuple[str, str | None]:
    """The server's own (message, type) from vLLM's (or OpenAI's) error envelope, else the body."""
    try:
        payload = json.loads(resp_text)
    except (json.JSONDecodeError, ValueError):
        return resp_text.strip()[:BODY_EXCERPT_CHARS], None
    if isinstance(payload, dict):
        err = payload.get("error", payload)
        if isinstance(err, dict) and err.get("message"):
            kind = err.get("type")
            return str(err["message"])[:BODY_EXCERPT_CHARS], str(kind) if kind else None
        if isinstance(err, str):
            return err[:BODY_EXCERPT_CHARS], None
    return resp_text.strip()[:BODY_EXCERPT_CHARS], None


def is_overload(status: int, message: str, err_type: str | None) -> bool:
    """vLLM's queue-full 503 (back-pressure), as opposed to a 503 from a dead or absent server."""
    if status != 503:
        return False
    text = message.lower()
    return err_type == OVERLOAD_TYPE and any(m in text for m in OVERLOAD_MARKERS)


class LLMClient:
    """Thread-safe; one per process. Coroutines run on ``self.loop``; the blocking forms
    may be called from any other thread."""

    def __init__(
        self,
        *,
        model: str,
        timeout_s: float,
        connect_timeout_s: float,
        max_connections: int,
        transport: httpx.AsyncBaseTransport | None = None,
        retry_after_max_s: float = DEFAULT_RETRY_AFTER_MAX_S,
    ):
        self.model = model
        self.retry_after_max_s = retry_after_max_s
        self._secrets: list[str] = []
        # Per endpoint: every request in flight to it, plus the health and metrics probes.
        limit = max(1, max_connections)
        self._http: Transport
        if transport is not None:
            self._http = HttpxTransport(
                transport, timeout_s=timeout_s, connect_timeout_s=connect_timeout_s,
                max_connections=limit,
            )  # fmt: skip
        else:
            self._http = AiohttpTransport(
                timeout_s=timeout_s, connect_timeout_s=connect_timeout_s, max_connections=limit
            )
        self._loop_thread = EventLoopThread()
        self._closed = False

    @property
    def loop_thread(self) -> EventLoopThread:
        return self._loop_thread

    def register_secret(self, secret: str | None) -> None:
        if secret:
            self._secrets.append(secret)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise TransientServiceError("the LLM client is closed")
        return self._loop_thread.run(coro)

    def close(self) -> None:
        """Close every connection and stop the loop (idempotent)."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):  # a loop already gone has nothing left to close
            self._loop_thread.submit(self._http.close()).result(timeout=5.0)
        self._loop_thread.stop()

    # ------------------------------------------------------------------ generation

    def complete(
        self,
        target: Target,
        prompts: Sequence[str],
        sampling: Sampling,
        *,
        stream: bool = False,
        job_id: str | None = None,
    ) -> Reply:
        """Blocking form of ``acomplete``."""
        return self._run(self.acomplete(target, prompts, sampling, stream=stream, job_id=job_id))

    async def acomplete(
        self,
        target: Target,
        prompts: Sequence[str],
        sampling: Sampling,
        *,
        stream: bool = False,
        job_id: str | None = None,
    ) -> Reply:
        """POST /v1/completions once; choices keyed by index, errors translated."""
        if self._closed:
            raise TransientServiceError("the LLM client is closed", job_id=job_id)
        body = json.dumps(build_body(self.model, prompts, sampling, stream=stream,
                                     dialect=target.dialect, priority=target.priority)).encode()
        url = f"{target.url}/v1/completions"
        sent_at = time.time()
        t0 = time.perf_counter()
        try:
            async with self._http.request(
                "POST", url, headers=target.headers(), body=body
            ) as resp:
                if resp.status >= 400:
                    self._raise_for_status(resp, await _read_head(resp, ERROR_BODY_BYTES), target, job_id)
                limit = reply_limit(len(prompts), sampling)
                most_tokens = sampling.n * len(prompts) * sampling.max_tokens
                if stream:
                    reply = await self._stream(resp, target, t0, job_id, limit, most_tokens)
                else:
                    reply = self._parse(resp, await resp.read(limit), target, t0, job_id, most_tokens)
                return replace(reply, sent_at=sent_at)
        except TransportFailure as exc:
            raise self._translate(exc, target, job_id) from exc
        except ReplyTooLarge as exc:
            raise OversizedReplyError(
                f"{target.display} sent a reply of {exc} for {len(prompts)} prompt(s) of at most "
                f"{sampling.max_tokens} tokens: not read further, the job fails (a server that "
                "answers past max_tokens is misbehaving)",
                endpoint=target.display, job_id=job_id,
            ) from None

    def _stream_chunk(
        self, data: str, target: Target, job_id: str | None
    ) -> tuple[dict[str, Any], list[Any]]:
        """One ``data:`` event as an object and its choices; a streamed error is raised."""
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError:
            raise self._malformed(target, job_id, "a streamed chunk is not JSON") from None
        if not isinstance(chunk, dict):
            raise self._malformed(target, job_id, "a streamed chunk is not an object")
        if chunk.get("error") is not None:
            # vLLM reports a failure after the 200 as an error event, then [DONE].
            raise self._stream_error(chunk, target, job_id)
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise self._malformed(target, job_id, "a streamed chunk's choices are not a list")
        return chunk, choices

    async def _stream(
        self, resp: Response, target: Target, t0: float, job_id: str | None, limit: int,
        max_completion_tokens: int,
    ) -> Reply:
        texts: dict[int, list[str]] = {}
        finish: dict[int, str | None] = {}
        usage = Usage()
        ttft_ms: float | None = None
        simulated = SIMULATOR_HEADER in resp.headers
        events = 0
        async for raw in resp.lines(limit):
            line = raw.decode("utf-8", errors="replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            events += 1
            if data == "[DONE]":
                break
            chunk, choices_raw = self._stream_chunk(data, target, job_id)
            for c in choices_raw:
                idx, piece, reason = self._choice_fields(c, target, job_id, streamed=True)
                if piece and ttft_ms is None:
                    ttft_ms = (time.perf_counter() - t0) * 1000.0
                texts.setdefault(idx, []).append(piece)
                if reason:
                    finish[idx] = reason
            if chunk.get("usage"):
                usage = _usage(chunk["usage"], max_completion_tokens)
        if not events:
            # llama.cpp's server sends its 200 first and then fails inside the stream without
            # a word (e.g. a prompt longer than its window): the error exists only unstreamed.
            raise self._malformed(
                target, job_id, "the stream ended before any event (llama.cpp's server does so "
                "when a request fails before its first token, e.g. a prompt longer than its "
                "window: the same request without QFARM_LLM_STREAM shows the error)")
        if not texts:
            raise self._malformed(target, job_id, "the stream carried no choices")
        choices = {i: Choice(i, "".join(parts), finish.get(i)) for i, parts in texts.items()}
        elapsed = (time.perf_counter() - t0) * 1000.0
        return Reply(
            choices=choices, usage=usage, simulated=simulated, elapsed_ms=elapsed, ttft_ms=ttft_ms
        )

    def _choice_fields(
        self, c: object, target: Target, job_id: str | None, *, streamed: bool
    ) -> tuple[int, str, str | None]:
        """A choice's index, text and finish reason, each of the type the API gives it; a
        server that sends anything else is malformed (retried elsewhere), not a crash."""
        if not isinstance(c, dict):
            raise self._malformed(target, job_id, "a choice is not an object")
        idx = c.get("index", 0 if streamed else None)
        text = c.get("text", "" if streamed else None)
        if streamed and text is None:
            text = ""
        reason = c.get("finish_reason")
        if not isinstance(idx, int) or isinstance(idx, bool) or not 0 <= idx < 1 << 20:
            raise self._malformed(target, job_id, "a choice lacks a small non-negative integer index")
        if not isinstance(text, str):
            raise self._malformed(target, job_id, "a choice's text is not a string")
        if reason is not None and not isinstance(reason, str):
            raise self._malformed(target, job_id, "a choice's finish_reason is not a string")
        return idx, text, reason

    def _parse(
        self, resp: Response, content: bytes, target: Target, t0: float, job_id: str | None,
        max_completion_tokens: int,
    ) -> Reply:
        try:
            payload = json.loads(content)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise self._malformed(target, job_id, "the body is not valid JSON") from None
        raw = payload.get("choices") if isinstance(payload, dict) else None
        if not isinstance(raw, list) or not raw:
            raise self._malformed(target, job_id, "the reply has no choices")
        choices: dict[int, Choice] = {}
        for c in raw:
            idx, text, reason = self._choice_fields(c, target, job_id, streamed=False)
            choices[idx] = Choice(idx, text, reason)
        elapsed = (time.perf_counter() - t0) * 1000.0
        return Reply(
            choices=choices,
            usage=_usage(payload.get("usage"), max_completion_tokens),
            simulated=SIMULATOR_HEADER in resp.headers,
            elapsed_ms=elapsed,
        )

    def missing_choice(self, target: Target, job_id: str | None, index: int) -> MalformedReplyError:
        return self._malformed(target, job_id, f"no choice with index {index}")

    def _malformed(self, target: Target, job_id: str | None, what: str) -> MalformedReplyError:
        return MalformedReplyError(
            f"{target.display} returned a malformed reply: {what}",
            endpoint=target.display,
            job_id=job_id,
        )

    def _stream_error(
        self, chunk: dict[str, Any], target: Target, job_id: str | None
    ) -> TransientStatusError | PermanentStatusError:
        err = chunk["error"]
        message, err_type = _error_message(json.dumps(chunk))
        code = err.get("code") if isinstance(err, dict) else None
        status = code if isinstance(code, int) and not isinstance(code, bool) else 500
        return self._http_error(
            status, message, err_type, target, job_id, None, where="streamed an error event,"
        )

    def _raise_for_status(
        self, resp: Response, content: bytes, target: Target, job_id: str | None
    ) -> None:
        message, err_type = _error_message(content.decode("utf-8", errors="replace"))
        raise self._http_error(
            resp.status,
            message or resp.reason,
            err_type,
            target,
            job_id,
            resp.headers.get("Retry-After"),
        )

    def _http_error(
        self,
        status: int,
        message: str,
        err_type: str | None,
        target: Target,
        job_id: str | None,
        retry_after: str | None,
        *,
        where: str | None = None,
    ) -> TransientStatusError | PermanentStatusError:
        """An HTTP error status (or a stream's error event with that code) as its error class."""
        detail = redact(message, [target.api_key, *self._secrets])
        if err_type:
            detail = f"{detail} [{redact(err_type, [target.api_key, *self._secrets])}]"
        where = f"{target.display} {where or 'answered'} {status}"
        if status in (401, 403):
            return PermanentStatusError(
                f"{where}: the API key was refused; set QFARM_LLM_API_KEY (or this endpoint's "
                "entry in QFARM_LLM_API_KEYS) to a key the server accepts",
                status=status,
                endpoint=target.display,
                job_id=job_id,
            )
        if status == 500 and VALIDATION_ERROR_RE.match(message):
            return PermanentStatusError(
                f"{where}: {detail}; the server refused a request parameter (a 500 for a "
                "validation error: llama.cpp's server)",
                status=status,
                endpoint=target.display,
                job_id=job_id,
            )
        if is_transient_status(status):
            overload = is_overload(status, message, err_type)
            transient: type[TransientStatusError] = TransientStatusError
            if overload:
                transient = QueueFullError
            elif status == 429:
                transient = BackPressureError
            return transient(
                f"{where}: {detail}" + (" (queue full: back-pressure)" if overload else ""),
                status=status,
                endpoint=target.display,
                job_id=job_id,
                retry_after_s=parse_retry_after(retry_after, cap_s=self.retry_after_max_s),
            )
        if status == 400 and (
            "context length" in message.lower() or "than max_model_len" in message
        ):
            return ContextOverflowError(
                f"context overflow: {where}: {detail}; lower max_context_chars_by_mode or "
                "max_tokens in the policy, or serve the model with a larger --max-model-len",
                status=status,
                endpoint=target.display,
                job_id=job_id,
            )
        hint = ""
        if status == 404:
            hint = f"; check QFARM_MODEL ({self.model}) against the server's /v1/models"
        elif status == 501:
            hint = "; the server does not implement this feature (e.g. structured output)"
        elif status == 400 and "priority scheduling is not enabled" in message.lower():
            hint = ("; start the server with --scheduling-policy priority, or unset "
                    "QFARM_LLM_PRIORITY")
        return PermanentStatusError(
            f"{where}: {detail}{hint}", status=status, endpoint=target.display, job_id=job_id
        )

    def _translate(
        self, exc: TransportFailure, target: Target, job_id: str | None
    ) -> TransientServiceError:
        """A transport failure as the LLM failure class of the same kind."""
        failure: type[TransientServiceError]
        failure, what = {
            "connect": (LLMConnectError, "cannot connect"),
            "timeout": (LLMTimeoutError, "timed out"),
            "dropped": (LLMDroppedError, "dropped the connection"),
        }.get(exc.kind, (LLMDroppedError, "failed"))
        detail = redact(str(exc), [target.api_key, *self._secrets])[:BODY_EXCERPT_CHARS]
        return failure(
            f"{target.display} {what} ({exc.cause}: {detail})",
            endpoint=target.display,
            job_id=job_id,
        )

    # ------------------------------------------------------------------ probes

    async def _get(
        self, target: Target, path: str, timeout_s: float, *, auth: bool = True
    ) -> tuple[int, bytes]:
        headers = target.headers() if auth else {}
        async with self._http.request(
            "GET", f"{target.url}{path}", headers=headers, timeout_s=timeout_s
        ) as resp:
            return resp.status, await _read_head(resp, PROBE_BODY_BYTES)

    async def acheck_health(self, target: Target, timeout_s: float) -> bool:
        return (await self.aprobe(target, HEALTH_PATH, timeout_s)).ok

    async def aprobe(self, target: Target, path: str, timeout_s: float) -> Probe:
        """GET ``path`` (``/health``, or ``/v1/models`` where there is none) as a ``Probe``."""
        try:
            # /health takes no key in vLLM; /v1/models does.
            status, _ = await self._get(target, path, timeout_s, auth=path != HEALTH_PATH)
        except TransportFailure as exc:
            return Probe(path, failure=exc.kind)
        return Probe(path, status=status)

    async def aserver_info(self, target: Target, timeout_s: float) -> ServerInfo | None:
        """What the server says it is, where it says so: llama-cpp-python's server titles
        its FastAPI schema (``/openapi.json``) "llama.cpp Python API" with its version."""
        try:
            status, content = await self._get(target, "/openapi.json", timeout_s)
            payload = json.loads(content) if status == 200 else None
        except (TransportFailure, json.JSONDecodeError, UnicodeDecodeError):
            return None
        return server_info_from_openapi(payload)

    async def ascrape_metrics(self, target: Target, timeout_s: float) -> MetricsScrape:
        try:
            status, content = await self._get(target, "/metrics", timeout_s)
        except TransportFailure as exc:
            return MetricsScrape(None, f"/metrics unreachable ({exc.cause})")
        if status == 404:
            # llama.cpp's server (and most servers that are not vLLM) has no /metrics at all.
            return MetricsScrape(None, "/metrics answered 404: no vllm:* gauges (not a vLLM server?)")
        if status != 200:
            return MetricsScrape(None, f"/metrics answered {status}")
        values = parse_prometheus(content.decode("utf-8", errors="replace"))
        if len(values) != len(METRIC_NAMES):
            # vLLM started with --disable-log-stats still serves /metrics, without vllm:* gauges.
            return MetricsScrape(
                None,
                "/metrics has no vllm:num_requests_running/waiting gauges (vLLM started with "
                "--disable-log-stats?)",
            )
        return MetricsScrape(values)

    async def amodel_entry(self, target: Target, timeout_s: float) -> dict[str, Any] | None:
        """QFARM_MODEL's entry in the server's ``/v1/models`` (None: unreachable, or not listed)."""
        try:
            status, content = await self._get(target, "/v1/models", timeout_s)
            payload = json.loads(content) if status == 200 else None
        except (TransportFailure, json.JSONDecodeError, UnicodeDecodeError):
            return None
        entries = payload.get("data") if isinstance(payload, dict) else None
        for entry in entries if isinstance(entries, list) else ():
            if isinstance(entry, dict) and entry.get("id") == self.model:
                return entry
        return None

    async def amax_model_len(self, target: Target, timeout_s: float) -> int | None:
        """``max_model_len`` of QFARM_MODEL as the server's ``/v1/models`` reports it (vLLM does)."""
        return window_of(await self.amodel_entry(target, timeout_s))

    def check_health(self, target: Target, timeout_s: float) -> bool:
        return self._run(self.acheck_health(target, timeout_s))

    def probe(self, target: Target, path: str, timeout_s: float) -> Probe:
        return self._run(self.aprobe(target, path, timeout_s))

    def server_info(self, target: Target, timeout_s: float) -> ServerInfo | None:
        return self._run(self.aserver_info(target, timeout_s))

    def scrape_metrics(self, target: Target, timeout_s: float) -> MetricsScrape:
        return self._run(self.ascrape_metrics(target, timeout_s))

    def max_model_len(self, target: Target, timeout_s: float) -> int | None:
        return self._run(self.amax_model_len(target, timeout_s))

    def model_entry(self, target: Target, timeout_s: float) -> dict[str, Any] | None:
        return self._run(self.amodel_entry(target, timeout_s))


# What of a /v1/models entry says which model is served, and how: the response cache's key
# (worker/llm/response_cache.py). Not ``created`` (vLLM stamps the time of the request) nor
# ``permission`` (ids and times made per request).
SERVED_FIELDS = ("id", "root", "parent", "max_model_len", "owned_by")


def window_of(entry: dict[str, Any] | None) -> int | None:
    value = entry.get("max_model_len") if entry else None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def served_identity(entry: dict[str, Any] | None, server: str | None) -> dict[str, Any] | None:
    """What an endpoint said it serves, for the response cache's key; None when it said
    nothing (no such entry): such an endpoint's replies are never cached."""
    if not entry:
        return None
    identity: dict[str, Any] = {k: entry[k] for k in SERVED_FIELDS if entry.get(k) is not None}
    identity["server"] = server or VLLM
    return identity


def _usage(raw: object, max_completion_tokens: int) -> Usage:
    """What a server says it spent, where it is believable: a count that is not a whole
    number from 0 up (or more completion tokens than ``max_tokens`` allowed) is unknown,
    and estimated like a missing one, never summed into the cost table."""
    if not isinstance(raw, dict):
        return Usage()

    def as_int(v: Any, most: int) -> int | None:
        ok = isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= most
        return v if ok else None

    return Usage(
        prompt_tokens=as_int(raw.get("prompt_tokens"), MAX_REPORTED_TOKENS),
        completion_tokens=as_int(raw.get("completion_tokens"),
                                 min(max_completion_tokens, MAX_REPORTED_TOKENS)),
    )


async def _read_head(resp: Response, limit: int) -> bytes:
    """An error's body, or as much of it as fits ``limit`` (the message is at its start)."""
    try:
        return await resp.read(limit)
    except ReplyTooLarge:
        return b"(a body of more than %d bytes, not read)" % limit
