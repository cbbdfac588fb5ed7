"""HTTP to OpenAI-compatible endpoints: one small ``httpx.Client`` per thread, no retries.

This layer sends one request and translates what comes back into either a
``Reply`` (choices mapped by their ``index``, never by position) or one of the
LLM failure classes of ``common.errors`` (a kind is a type: ``LLMConnectError``,
``BackPressureError``, ``ContextOverflowError``…) carrying the endpoint and job id. It never retries (``retry.py`` and the gateway own that) and never puts
an API key in a message: keys travel only in the ``Authorization`` header of
each request, and any text taken from a server is passed through ``redact``.

Each thread gets its own client (a keep-alive connection per endpoint) instead of
sharing one pool: httpcore 1.0's pool scans every connection under one lock on
each request (encode/httpcore#1035), which with 64 threads on a 66-connection
pool cost more CPU than the requests themselves (bench/perf/orchestration.py).
A thread sends one request at a time, so its pool never needs more.

Tests swap the transport for ``httpx.MockTransport``; integration tests use the
simulator over real HTTP.
"""

from __future__ import annotations

import json
import threading
import time
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from common.errors import (
    BackPressureError,
    ContextOverflowError,
    LLMConnectError,
    LLMDroppedError,
    LLMTimeoutError,
    MalformedReplyError,
    PermanentStatusError,
    QueueFullError,
    TransientServiceError,
    TransientStatusError,
)
from common.models import Sampling, Usage
from common.vocab import SIMULATOR_HEADER
from worker.llm.retry import DEFAULT_RETRY_AFTER_MAX_S, is_transient_status, parse_retry_after

BODY_EXCERPT_CHARS = 300
METRIC_NAMES = ("vllm:num_requests_running", "vllm:num_requests_waiting")
# vLLM's admission control (--max-num-queued-reqs / --max-num-queued-tokens) answers 503 with
# error.type "Service Unavailable" and one of these messages (vllm/exceptions.py,
# QueueOverflowError and MaxQueuedTokensError): a live server pushing back, not a dead one.
OVERLOAD_TYPE = "Service Unavailable"
OVERLOAD_MARKERS = ("cannot accept new requests", "prefill token backlog limit")
FINISHED_OK = frozenset({"stop", "length"})


@dataclass(frozen=True)
class MetricsScrape:
    """One ``/metrics`` read: the gauges, or why there are none."""

    values: dict[str, float] | None
    problem: str | None = None  # None: values present


@dataclass(frozen=True)
class Target:
    """An endpoint as the client needs it; the key never shows in ``repr``."""

    url: str
    api_key: str | None = field(default=None, repr=False)

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


def display_url(url: str) -> str:
    """The URL without any ``user:password@`` part, for messages and rows."""
    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return url


def redact(text: str, secrets: Iterable[str | None]) -> str:
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return text


def build_body(
    model: str, prompts: Sequence[str], sampling: Sampling, *, stream: bool
) -> dict[str, Any]:
    """Every sampling parameter pinned in the request, so server defaults never leak in.

    ``top_p`` is pinned to 1.0 because a server started without
    ``--generation-config vllm`` would otherwise apply the model's own
    generation_config (Llama 3.1 ships top_p 0.9).
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
    if sampling.response_format is not None:
        body["response_format"] = sampling.response_format
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
    """Thread-safe; share one per process (each thread talks through its own pool)."""

    def __init__(
        self,
        *,
        model: str,
        timeout_s: float,
        connect_timeout_s: float,
        max_connections: int,
        transport: httpx.BaseTransport | None = None,
        retry_after_max_s: float = DEFAULT_RETRY_AFTER_MAX_S,
    ):
        self.model = model
        self.retry_after_max_s = retry_after_max_s
        self._secrets: list[str] = []
        self._timeout = httpx.Timeout(timeout_s, connect=connect_timeout_s, pool=timeout_s)
        # Per thread: one request at a time, but failover may visit several endpoints.
        self._per_thread = max(1, max_connections)
        self._transport = transport
        # Made once: building an SSL context costs ~20 ms, a client without one ~0.1 ms.
        self._ssl = httpx.create_ssl_context()
        self._local = threading.local()
        self._clients: weakref.WeakSet[httpx.Client] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._closed = False

    @property
    def _http(self) -> httpx.Client:
        """This thread's client, made on first use."""
        if self._closed:
            raise TransientServiceError("the LLM client is closed")
        client = getattr(self._local, "client", None)
        if client is None:
            client = httpx.Client(
                timeout=self._timeout,
                limits=httpx.Limits(
                    max_connections=self._per_thread, max_keepalive_connections=self._per_thread
                ),
                transport=self._transport,
                verify=self._ssl,
                follow_redirects=False,
            )
            with self._lock:
                if self._closed:
                    client.close()
                    raise TransientServiceError("the LLM client is closed")
                self._clients.add(client)
            self._local.client = client
        return client

    def register_secret(self, secret: str | None) -> None:
        if secret:
            self._secrets.append(secret)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            clients = list(self._clients)
        for client in clients:
            client.close()

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
        """POST /v1/completions once; choices keyed by index, errors translated."""
        body = build_body(self.model, prompts, sampling, stream=stream)
        url = f"{target.url}/v1/completions"
        t0 = time.perf_counter()
        try:
            if stream:
                return self._stream(target, url, body, t0, job_id)
            resp = self._http.post(url, json=body, headers=target.headers())
            self._raise_for_status(resp, target, job_id)
            return self._parse(resp, target, t0, job_id)
        except httpx.HTTPError as exc:
            raise self._translate(exc, target, job_id) from exc

    def _stream(
        self, target: Target, url: str, body: dict[str, Any], t0: float, job_id: str | None
    ) -> Reply:
        texts: dict[int, list[str]] = {}
        finish: dict[int, str | None] = {}
        usage = Usage()
        ttft_ms: float | None = None
        with self._http.stream("POST", url, json=body, headers=target.headers()) as resp:
            if resp.status_code >= 400:
                resp.read()
                self._raise_for_status(resp, target, job_id)
            simulated = SIMULATOR_HEADER in resp.headers
            for line in resp.iter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                try:
                    chunk = json.loads(data)
                except json.JSONDecodeError:
                    raise self._malformed(target, job_id, "a streamed chunk is not JSON") from None
                if not isinstance(chunk, dict):
                    raise self._malformed(target, job_id, "a streamed chunk is not an object")
                if chunk.get("error") is not None:
                    # vLLM reports a failure after the 200 as an error event, then [DONE].
                    raise self._stream_error(chunk, target, job_id)
                for c in chunk.get("choices") or ():
                    idx = int(c.get("index", 0))
                    piece = c.get("text") or ""
                    if piece and ttft_ms is None:
                        ttft_ms = (time.perf_counter() - t0) * 1000.0
                    texts.setdefault(idx, []).append(piece)
                    if c.get("finish_reason"):
                        finish[idx] = c["finish_reason"]
                if chunk.get("usage"):
                    usage = _usage(chunk["usage"])
        if not texts:
            raise self._malformed(target, job_id, "the stream carried no choices")
        choices = {i: Choice(i, "".join(parts), finish.get(i)) for i, parts in texts.items()}
        elapsed = (time.perf_counter() - t0) * 1000.0
        return Reply(
            choices=choices, usage=usage, simulated=simulated, elapsed_ms=elapsed, ttft_ms=ttft_ms
        )

    def _parse(self, resp: httpx.Response, target: Target, t0: float, job_id: str | None) -> Reply:
        try:
            payload = resp.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise self._malformed(target, job_id, "the body is not valid JSON") from None
        raw = payload.get("choices") if isinstance(payload, dict) else None
        if not isinstance(raw, list) or not raw:
            raise self._malformed(target, job_id, "the reply has no choices")
        choices: dict[int, Choice] = {}
        for c in raw:
            if (
                not isinstance(c, dict)
                or not isinstance(c.get("index"), int)
                or not isinstance(c.get("text"), str)
            ):
                raise self._malformed(target, job_id, "a choice lacks an integer index or a text")
            choices[c["index"]] = Choice(c["index"], c["text"], c.get("finish_reason"))
        elapsed = (time.perf_counter() - t0) * 1000.0
        return Reply(
            choices=choices,
            usage=_usage(payload.get("usage") or {}),
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

    def _raise_for_status(self, resp: httpx.Response, target: Target, job_id: str | None) -> None:
        if resp.status_code < 400:
            return
        message, err_type = _error_message(resp.text)
        raise self._http_error(
            resp.status_code,
            message or resp.reason_phrase,
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
        return PermanentStatusError(
            f"{where}: {detail}{hint}", status=status, endpoint=target.display, job_id=job_id
        )

    def _translate(
        self, exc: httpx.HTTPError, target: Target, job_id: str | None
    ) -> TransientServiceError:
        """An httpx transport failure as the LLM failure class of the same kind."""
        failure: type[TransientServiceError]
        if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
            failure, what = LLMConnectError, "cannot connect"
        elif isinstance(exc, httpx.TimeoutException):
            failure, what = LLMTimeoutError, "timed out"
        elif isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError):
            failure, what = LLMDroppedError, "dropped the connection"
        else:
            failure, what = LLMDroppedError, "failed"
        detail = redact(str(exc), [target.api_key, *self._secrets])[:BODY_EXCERPT_CHARS]
        return failure(
            f"{target.display} {what} ({type(exc).__name__}: {detail})",
            endpoint=target.display,
            job_id=job_id,
        )

    # ------------------------------------------------------------------ probes

    def check_health(self, target: Target, timeout_s: float) -> bool:
        try:
            resp = self._http.get(f"{target.url}/health", timeout=timeout_s)
        except httpx.HTTPError:
            return False
        return resp.status_code == 200

    def scrape_metrics(self, target: Target, timeout_s: float) -> MetricsScrape:
        try:
            resp = self._http.get(
                f"{target.url}/metrics", headers=target.headers(), timeout=timeout_s
            )
        except httpx.HTTPError as exc:
            return MetricsScrape(None, f"/metrics unreachable ({type(exc).__name__})")
        if resp.status_code != 200:
            return MetricsScrape(None, f"/metrics answered {resp.status_code}")
        values = parse_prometheus(resp.text)
        if len(values) != len(METRIC_NAMES):
            # vLLM started with --disable-log-stats still serves /metrics, without vllm:* gauges.
            return MetricsScrape(
                None,
                "/metrics has no vllm:num_requests_running/waiting gauges (vLLM started with "
                "--disable-log-stats?)",
            )
        return MetricsScrape(values)

    def max_model_len(self, target: Target, timeout_s: float) -> int | None:
        """``max_model_len`` of QFARM_MODEL as the server's ``/v1/models`` reports it (vLLM does)."""
        try:
            resp = self._http.get(
                f"{target.url}/v1/models", headers=target.headers(), timeout=timeout_s
            )
            payload = resp.json() if resp.status_code == 200 else None
        except (httpx.HTTPError, json.JSONDecodeError, UnicodeDecodeError):
            return None
        entries = payload.get("data") if isinstance(payload, dict) else None
        for entry in entries if isinstance(entries, list) else ():
            if isinstance(entry, dict) and entry.get("id") == self.model:
                value = entry.get("max_model_len")
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    return value
        return None


def _usage(raw: dict[str, Any]) -> Usage:
    def as_int(v: Any) -> int | None:
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    return Usage(
        prompt_tokens=as_int(raw.get("prompt_tokens")),
        completion_tokens=as_int(raw.get("completion_tokens")),
    )
