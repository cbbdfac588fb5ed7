"""The response cache (docs/llm.md, 'Response cache'): what its key holds, what is stored
and served, and that a run without ``--cache`` never touches it."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from qfarm.common import keys
from qfarm.common.cache import ResponseEntry, read_response_entry
from qfarm.common.errors import PermanentServiceError
from qfarm.common.models import Sampling
from qfarm.common.settings import Settings
from qfarm.worker.llm import Gateway
from qfarm.worker.llm.client import build_body, served_identity
from qfarm.worker.llm.response_cache import (
    MemoryResponseCache,
    RedisResponseCache,
    is_cacheable,
)

URL = "http://llm.test:8000"
MODEL = "m"
CACHED = Sampling(temperature=0.7, max_tokens=32, seed=11, cache=True)
TEST_DB = int(os.environ.get("QFARM_TEST_REDIS_DB", "9"))


class FakeServer:
    """A /v1/models and /v1/completions whose answer is a function of (prompt, seed);
    counts completion requests; ``fail``/``finish`` set how the next replies go."""

    def __init__(self, root: str = "/models/m", max_model_len: int = 8192):
        self.root = root
        self.max_model_len = max_model_len
        self.completions = 0
        self.fail: int | None = None  # an HTTP status to answer completions with
        self.finish = "stop"
        self._lock = threading.Lock()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(
                200,
                json={
                    "object": "list",
                    "data": [
                        {
                            "id": MODEL,
                            "object": "model",
                            "created": 1,
                            "owned_by": "vllm",
                            "root": self.root,
                            "parent": None,
                            "max_model_len": self.max_model_len,
                        }
                    ],
                },
            )
        if request.url.path != "/v1/completions":
            return httpx.Response(404)
        with self._lock:
            self.completions += 1
        if self.fail is not None:
            return httpx.Response(
                self.fail,
                json={
                    "error": {
                        "message": "bad request",
                        "type": "BadRequestError",
                        "param": None,
                        "code": self.fail,
                    }
                },
            )
        body = json.loads(request.content)
        text = f"answer to {body['prompt']} with seed {body['seed']}"
        return httpx.Response(
            200,
            json={
                "id": "c",
                "object": "text_completion",
                "model": MODEL,
                "choices": [{"index": 0, "text": text, "finish_reason": self.finish}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
            },
        )


class CountingStore(MemoryResponseCache):
    """An in-memory store that counts what it is asked."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = self.writes = 0

    def get_many(self, digests: Any) -> list[str | bytes | None]:
        self.reads += 1
        return super().get_many(digests)

    def put_many(self, entries: Any) -> None:
        self.writes += 1
        super().put_many(entries)


def gateway(server: FakeServer, store: Any) -> Gateway:
    settings = Settings(llm_endpoints=URL, model=MODEL, llm_health_interval_s=0.0)
    return Gateway(settings, transport=httpx.MockTransport(server), response_store=store)


@pytest.fixture
def shared_redis() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(f"redis://127.0.0.1:6379/{TEST_DB}")
    client.flushdb()
    yield client
    client.flushdb()


# --------------------------------------------------------------------------- the key

SERVED = {
    "id": MODEL,
    "root": "/models/m",
    "max_model_len": 8192,
    "owned_by": "vllm",
    "server": "vllm",
}


def digest(served: dict | None = None, prompt: str = "p", **sampling: Any) -> str:
    body = build_body(
        MODEL if "model" not in sampling else sampling.pop("model"),
        [prompt],
        CACHED.model_copy(update=sampling),
        stream=False,
    )
    return keys.response_cache_digest(served or SERVED, body)


def test_the_key_changes_with_the_model_its_revision_the_prompt_and_every_parameter() -> None:
    base = digest()
    assert digest() == base  # stable
    changed = [
        digest(model="other"),
        digest(served={**SERVED, "root": "/models/m-rev2"}),
        digest(served={**SERVED, "max_model_len": 4096}),
        digest(served={**SERVED, "server": "llama.cpp server (llama-cpp-python 0.3.36)"}),
        digest(prompt="p "),
        digest(temperature=0.0),
        digest(max_tokens=33),
        digest(seed=12),
        digest(stop=("</s>",)),
        digest(n=2),
        digest(grammar='root ::= "x"'),
    ]
    assert base not in changed and len(set(changed)) == len(changed)


def test_every_body_field_is_keyed_but_the_transport_ones() -> None:
    """Derived from the body itself: a field added to the request later is keyed too."""
    body = build_body(MODEL, ["p"], CACHED, stream=False)
    base = keys.response_cache_digest(SERVED, body)
    for field in body:
        assert keys.response_cache_digest(SERVED, {**body, field: "x"}) != base, field
    assert keys.response_cache_digest(SERVED, {**body, "logprobs": 3}) != base
    streamed = build_body(MODEL, ["p"], CACHED, stream=True)
    assert keys.response_cache_digest(SERVED, {**streamed, "priority": 1}) == base


def test_served_identity_keeps_what_names_the_model_not_the_request_time() -> None:
    entry = {
        "id": MODEL,
        "created": 123,
        "root": "/r",
        "max_model_len": 10,
        "owned_by": "vllm",
        "permission": [{"id": "perm-1", "created": 123}],
    }
    assert served_identity(entry, None) == {
        "id": MODEL,
        "root": "/r",
        "max_model_len": 10,
        "owned_by": "vllm",
        "server": "vllm",
    }
    assert served_identity(None, None) is None


def test_unseeded_sampling_above_temperature_zero_is_never_cached() -> None:
    body = build_body(MODEL, ["p"], CACHED, stream=False)
    assert is_cacheable(CACHED, body)
    assert not is_cacheable(CACHED, {**body, "seed": None})
    assert is_cacheable(CACHED, {**body, "seed": None, "temperature": 0.0})
    assert not is_cacheable(CACHED.model_copy(update={"cache": False}), body)


# --------------------------------------------------------------------------- the gateway


def test_a_hit_returns_the_same_answer_without_asking_the_model() -> None:
    server, store = FakeServer(), CountingStore()
    with gateway(server, store) as gw:
        first = gw.generate("q1", CACHED, job_id="a")
        second = gw.generate("q1", CACHED, job_id="b")
    assert server.completions == 1
    assert second.text == first.text and second.usage == first.usage
    assert first.response_cache_hit is False and second.response_cache_hit is True
    assert second.attempts == 0 and second.request is None
    assert first.request is not None and second.model_ms_saved == pytest.approx(
        first.request.ms, abs=0.01
    )


def test_another_seed_or_prompt_asks_the_model() -> None:
    server = FakeServer()
    with gateway(server, MemoryResponseCache()) as gw:
        gw.generate("q1", CACHED, job_id="a")
        gw.generate("q1", CACHED.model_copy(update={"seed": 12}), job_id="b")
        gw.generate("q2", CACHED, job_id="c")
    assert server.completions == 3


def test_errors_and_truncated_answers_are_never_cached() -> None:
    server, store = FakeServer(), CountingStore()
    with gateway(server, store) as gw:
        server.fail = 400
        with pytest.raises(PermanentServiceError):
            gw.generate("q1", CACHED, job_id="a")
        server.fail, server.finish = None, "length"
        cut = gw.generate("q1", CACHED, job_id="b")
        assert cut.truncated and len(store) == 0
        server.finish = "stop"
        gw.generate("q1", CACHED, job_id="c")
        assert len(store) == 1
    assert server.completions == 3


def test_without_cache_nothing_is_read_or_written() -> None:
    server, store = FakeServer(), CountingStore()
    off = CACHED.model_copy(update={"cache": False})
    with gateway(server, store) as gw:
        a = gw.generate("q1", off, job_id="a")
        gw.generate("q1", off, job_id="b")
    assert server.completions == 2 and store.reads == store.writes == 0
    assert a.response_cache_hit is None and a.model_ms_saved is None


def test_two_gateways_over_one_redis_share_entries_and_another_revision_never_hits(
    shared_redis: redis.Redis,
) -> None:
    one, two, other = FakeServer(), FakeServer(), FakeServer(root="/models/m-rev2")
    with gateway(one, RedisResponseCache(shared_redis)) as gw:
        first = gw.generate("q1", CACHED, job_id="a")
    with gateway(two, RedisResponseCache(shared_redis)) as gw:
        again = gw.generate("q1", CACHED, job_id="b")
    with gateway(other, RedisResponseCache(shared_redis)) as gw:
        gw.generate("q1", CACHED, job_id="c")
    assert (one.completions, two.completions, other.completions) == (1, 0, 1)
    assert again.text == first.text and again.response_cache_hit
    found = list(shared_redis.scan_iter(match=keys.RESPONSE_CACHE_PATTERN))
    assert len(found) == 2
    assert 0 < shared_redis.ttl(found[0]) <= keys.RESPONSE_CACHE_TTL_S
    entries = [read_response_entry(shared_redis.get(k) or b"") for k in found]
    assert sorted(str(e.revision) for e in entries) == ["/models/m", "/models/m-rev2"]


def test_an_unreachable_store_is_a_miss_not_an_error(unused_port: int) -> None:
    server = FakeServer()
    down = redis.Redis(host="127.0.0.1", port=unused_port, socket_connect_timeout=0.2)
    with gateway(server, RedisResponseCache(down)) as gw:
        assert gw.generate("q1", CACHED, job_id="a").text.startswith("answer to q1")
        assert gw.generate("q1", CACHED, job_id="b").response_cache_hit is False
    assert server.completions == 2


def test_an_entry_reads_back_for_qfarm_cache() -> None:
    entry = ResponseEntry(
        model=MODEL,
        served=SERVED,
        text="t",
        finish_reason="stop",
        usage={"prompt_tokens": 1, "completion_tokens": 2},
        model_ms=5.0,
        created_at=100.0,
    )
    seen = read_response_entry(entry.model_dump_json())
    assert (seen.model, seen.revision, seen.finished_at) == (MODEL, "/models/m", 100.0)
    assert not read_response_entry(b"{not json").readable
