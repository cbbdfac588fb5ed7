"""The HTTP client against httpx.MockTransport: request shape, reply mapping, error translation."""

from __future__ import annotations

import json

import httpx
import pytest

from qfarm.common.errors import (
    LLMConnectError,
    LLMTimeoutError,
    MalformedReplyError,
    PermanentServiceError,
    TransientServiceError,
)
from qfarm.common.models import Sampling
from qfarm.worker.llm.client import (
    LLAMA_CPP,
    VLLM,
    LLMClient,
    Target,
    build_body,
    display_url,
    parse_prometheus,
    redact,
)

KEY = "sk-test-0123456789"


def client_for(handler) -> LLMClient:
    return LLMClient(
        model="m",
        timeout_s=5,
        connect_timeout_s=1,
        max_connections=4,
        transport=httpx.MockTransport(handler),
    )


def ok_reply(
    choices: list[dict], usage: dict | None = None, headers: dict | None = None
) -> httpx.Response:
    body = {"choices": choices, "usage": usage or {"prompt_tokens": 3, "completion_tokens": 4}}
    return httpx.Response(200, json=body, headers=headers or {})


def test_every_sampling_parameter_is_pinned() -> None:
    seen: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(
            {"body": json.loads(request.content), "auth": request.headers.get("authorization")}
        )
        return ok_reply([{"index": 0, "text": "hi", "finish_reason": "stop"}])

    sampling = Sampling(temperature=0.3, max_tokens=77, seed=42, grammar='root ::= "x"')
    client_for(handler).complete(Target("http://gpu1:8000", KEY), ["p"], sampling, job_id="j")
    body = seen[0]["body"]
    assert body == {
        "model": "m",
        "prompt": "p",
        "temperature": 0.3,
        "top_p": 1.0,
        "max_tokens": 77,
        "seed": 42,
        "stop": ["<|im_end|>"],
        "n": 1,
        "structured_outputs": {"grammar": 'root ::= "x"'},
    }
    assert seen[0]["auth"] == f"Bearer {KEY}"


def test_a_grammar_goes_where_each_server_reads_it() -> None:
    """vLLM reads ``structured_outputs.grammar``; llama.cpp's server a top-level ``grammar``
    (and ignores the other's field, so a grammar in the wrong one would silently constrain
    nothing)."""
    seen: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return ok_reply([{"index": 0, "text": "x", "finish_reason": "stop"}])

    grammar = 'root ::= "x"'
    client = client_for(handler)
    for dialect in (VLLM, LLAMA_CPP):
        target = Target("http://gpu1:8000", KEY, dialect=dialect)
        client.complete(target, ["p"], Sampling(grammar=grammar), job_id="j")
    assert seen[0]["structured_outputs"] == {"grammar": grammar} and "grammar" not in seen[0]
    assert seen[1]["grammar"] == grammar and "structured_outputs" not in seen[1]
    client.complete(Target("http://gpu1:8000", KEY), ["p"], Sampling(), job_id="j")
    assert "grammar" not in seen[2] and "structured_outputs" not in seen[2]


def test_choices_are_mapped_by_index_not_position() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return ok_reply(
            [
                {"index": 2, "text": "two", "finish_reason": "stop"},
                {"index": 0, "text": "zero", "finish_reason": "length"},
                {"index": 1, "text": "one", "finish_reason": "stop"},
            ],
            headers={"x-qfarm-simulator": "1"},
        )

    reply = client_for(handler).complete(Target("http://a"), ["p0", "p1", "p2"], Sampling())
    assert {i: c.text for i, c in reply.choices.items()} == {0: "zero", 1: "one", 2: "two"}
    assert reply.choices[0].finish_reason == "length"
    assert reply.simulated and reply.usage.completion_tokens == 4


@pytest.mark.parametrize(
    ("response", "match"),
    [
        (httpx.Response(200, text='{"choices": [{"ind'), "not valid JSON"),
        (httpx.Response(200, json={"choices": []}), "no choices"),
        (httpx.Response(200, json={"choices": [{"text": "x"}]}), "integer index"),
        (httpx.Response(200, json=["not", "an", "object"]), "no choices"),
    ],
)
def test_malformed_replies_are_transient_errors(response: httpx.Response, match: str) -> None:
    client = client_for(lambda request: response)
    with pytest.raises(TransientServiceError, match=match) as info:
        client.complete(Target("http://a"), ["p"], Sampling(), job_id="job-7")
    assert info.value.endpoint == "http://a" and info.value.job_id == "job-7"
    assert isinstance(info.value, MalformedReplyError)


def test_status_codes_split_transient_and_permanent() -> None:
    def respond(status: int, **kw) -> LLMClient:
        return client_for(lambda request: httpx.Response(status, **kw))

    with pytest.raises(TransientServiceError) as info:
        respond(
            429, headers={"Retry-After": "7"}, json={"error": {"message": "slow down"}}
        ).complete(Target("http://a"), ["p"], Sampling())
    assert info.value.retry_after_s == 7.0 and "slow down" in str(info.value)
    with pytest.raises(TransientServiceError):
        respond(503, text="busy").complete(Target("http://a"), ["p"], Sampling())
    ctx = {"error": {"message": "This model's maximum context length is 8192 tokens.", "code": 400}}
    with pytest.raises(PermanentServiceError, match="context length.*max_context_chars_by_mode"):
        respond(400, json=ctx).complete(Target("http://a"), ["p"], Sampling())
    with pytest.raises(PermanentServiceError, match="QFARM_MODEL"):
        respond(404, json={"error": {"message": "The model `m` does not exist."}}).complete(
            Target("http://a"), ["p"], Sampling()
        )


def test_key_never_in_errors_even_when_the_server_echoes_it() -> None:
    echo = {"error": {"message": f"bad key {KEY} for you"}}
    for status in (401, 500, 400):
        client = client_for(lambda request, s=status: httpx.Response(s, json=echo))
        with pytest.raises((TransientServiceError, PermanentServiceError)) as info:
            client.complete(Target("http://a", KEY), ["p"], Sampling())
        assert KEY not in str(info.value)
        assert KEY not in repr(Target("http://a", KEY))
    with pytest.raises(PermanentServiceError, match="QFARM_LLM_API_KEY"):
        client_for(lambda request: httpx.Response(401, json=echo)).complete(
            Target("http://a", KEY), ["p"], Sampling()
        )


def test_connection_errors_are_transient_and_tagged() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(TransientServiceError, match="cannot connect") as info:
        client_for(refuse).complete(Target("http://a"), ["p"], Sampling())
    assert isinstance(info.value, LLMConnectError)

    def hang(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    with pytest.raises(TransientServiceError, match="timed out") as info:
        client_for(hang).complete(Target("http://a"), ["p"], Sampling())
    assert isinstance(info.value, LLMTimeoutError)


def test_stream_reply_collects_text_and_ttft() -> None:
    chunks = [
        {"choices": [{"index": 0, "text": "Hel", "finish_reason": None}]},
        {"choices": [{"index": 0, "text": "lo", "finish_reason": "stop"}]},
        {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 2}},
    ]
    sse = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"

    def handler(request: httpx.Request) -> httpx.Response:
        assert json.loads(request.content)["stream"] is True
        return httpx.Response(200, text=sse, headers={"content-type": "text/event-stream"})

    reply = client_for(handler).complete(Target("http://a"), ["p"], Sampling(), stream=True)
    assert reply.choices[0].text == "Hello" and reply.choices[0].finish_reason == "stop"
    assert reply.ttft_ms is not None and reply.usage.completion_tokens == 2


def test_helpers() -> None:
    assert display_url("http://user:pw@gpu1:8000") == "http://user:***@gpu1:8000"
    assert redact(f"x {KEY} y", [KEY, None]) == "x *** y"
    text = (
        '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="a"} 3\n'
        'vllm:num_requests_running{model_name="b"} 2\nvllm:num_requests_waiting{model_name="a"} 5.0\n'
    )
    assert parse_prometheus(text) == {
        "vllm:num_requests_running": 5.0,
        "vllm:num_requests_waiting": 5.0,
    }
    assert build_body("m", ["a", "b"], Sampling(), stream=False)["prompt"] == ["a", "b"]


def test_every_thread_shares_the_one_event_loop_and_close_ends_it() -> None:
    import asyncio
    import threading

    loops: dict[str, object] = {}

    async def handler(request: httpx.Request) -> httpx.Response:
        loops[json.loads(request.content)["prompt"]] = asyncio.get_running_loop()
        return ok_reply([{"index": 0, "text": "hi"}])

    client = client_for(handler)
    target = Target("http://gpu1:8000", None)

    def use(name: str) -> None:
        assert client.complete(target, [name], Sampling(), job_id=name).choices[0].text == "hi"

    threads = [threading.Thread(target=use, args=(f"t{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    use("main")
    assert sorted(loops) == ["main", "t0", "t1", "t2"]
    assert {id(loop) for loop in loops.values()} == {id(client.loop_thread.loop)}
    client.close()
    assert client.loop_thread.loop.is_closed()
    with pytest.raises(TransientServiceError, match="closed"):
        client.complete(target, ["p"], Sampling(), job_id="late")


@pytest.mark.parametrize(("usage", "expected"), [
    ({"prompt_tokens": -500, "completion_tokens": 4}, (None, 4)),
    ({"prompt_tokens": 3, "completion_tokens": 10**30}, (3, None)),
    ({"prompt_tokens": 3, "completion_tokens": 513}, (3, None)),  # past max_tokens 512
    ({"prompt_tokens": True, "completion_tokens": 4.0}, (None, None)),
    (["prompt_tokens", 3], (None, None)),
    ("lots", (None, None)),
])  # fmt: skip
def test_what_a_server_says_it_spent_is_believed_only_within_bounds(usage, expected) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"choices": [{"index": 0, "text": "hi", "finish_reason": "stop"}],
                                         "usage": usage})

    reply = client_for(handler).complete(Target("http://a"), ["p"], Sampling(max_tokens=512))
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == expected


@pytest.mark.parametrize("choice", [
    {"index": 0, "text": "hi", "finish_reason": {"type": "stop"}},
    {"index": 0, "text": ["hi"], "finish_reason": "stop"},
    {"index": -1, "text": "hi", "finish_reason": "stop"},
    {"index": True, "text": "hi", "finish_reason": "stop"},
    "a choice",
])  # fmt: skip
def test_choice_fields_of_the_wrong_type_are_a_malformed_reply_not_a_crash(choice) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"choices": [choice]})

    with pytest.raises(MalformedReplyError):
        client_for(handler).complete(Target("http://a"), ["p"], Sampling())


@pytest.mark.parametrize("stream", [False, True])
def test_a_reply_past_what_max_tokens_explains_is_cut_off_and_not_retried(stream: bool) -> None:
    from qfarm.common.errors import OversizedReplyError
    from qfarm.worker.llm.client import reply_limit

    sent = {"bytes": 0}

    async def flood():
        prefix = b'data: {"choices": [{"index": 0, "text": "' if stream else b'{"choices": [{"index": 0, "text": "'
        yield prefix
        for _ in range(800):  # 50 MB offered, 64 KB at a time
            sent["bytes"] += 1 << 16
            yield b"x" * (1 << 16)
        yield b'"}]}\n\n' if stream else b'"}]}'

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=flood(),
                              headers={"content-type": "text/event-stream" if stream else "application/json"})

    sampling = Sampling(max_tokens=64)
    with pytest.raises(OversizedReplyError, match="sent a reply of more than") as info:
        client_for(handler).complete(Target("http://a"), ["p"], sampling, stream=stream, job_id="j")
    assert isinstance(info.value, PermanentServiceError) and info.value.job_id == "j"
    assert sent["bytes"] <= reply_limit(1, sampling) + (1 << 17), "the flood was read past the limit"
