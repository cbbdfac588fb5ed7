"""The simulator's side of vLLM's OpenAI-compatible protocol: request parsing, reply bodies.

Mirrors vLLM where the farm depends on it: ``max_tokens`` defaults to 16,
errors use the ``{"error": {"message", "type", "param", "code"}}`` envelope,
an unknown model is a 404, a prompt longer than ``max_model_len`` a 400 with
vLLM's wording, choices carry ``index = prompt_i * n + j`` and ``usage`` is
summed over the request.
"""

from __future__ import annotations

import random
import time
from typing import Any

from aiohttp import web

from common.prompts import chatml_turn
from ops.sim import SIMULATOR_OWNER, behaviour
from ops.sim.config import SimConfig


class RequestError(Exception):
    """A request the server refuses, rendered as vLLM's error envelope."""

    def __init__(self, status: int, message: str, err_type: str = "BadRequestError"):
        super().__init__(message)
        self.status = status
        self.err_type = err_type


def error_response(status: int, message: str, err_type: str) -> web.Response:
    body = {"error": {"message": message, "type": err_type, "param": None, "code": status}}
    return web.json_response(body, status=status)


# --------------------------------------------------------------------------- parsing


def _int(body: dict, key: str, default: int | None, minimum: int) -> int | None:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise RequestError(400, f"{key} must be an integer >= {minimum} (got {value!r})")
    return value


def _stop_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return value
    raise RequestError(400, f"stop must be a string or a list of strings (got {value!r})")


def _is_structured(body: dict) -> bool:
    fmt = body.get("response_format") or {}
    if isinstance(fmt, dict) and fmt.get("type") in ("json_schema", "json_object"):
        return True
    so = body.get("structured_outputs") or {}
    return isinstance(so, dict) and bool(so.get("json"))


def parse_params(body: dict, config: SimConfig, rng: random.Random) -> dict[str, Any]:
    model = body.get("model") or config.model
    if model not in config.accepted_models():
        raise RequestError(404, f"The model `{model}` does not exist.", "NotFoundError")
    n = _int(body, "n", 1, 1)
    max_tokens = _int(body, "max_tokens", 16, 0)
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise RequestError(400, f"seed must be an integer (got {seed!r})")
    temperature = body.get("temperature", 1.0)
    if temperature is None:
        temperature = 1.0
    if not isinstance(temperature, int | float) or temperature < 0:
        raise RequestError(400, f"temperature must be a number >= 0 (got {temperature!r})")
    if seed is None:
        seed = rng.getrandbits(31)  # vLLM without a seed is not reproducible either
    return {
        "model": model,
        "n": n,
        "max_tokens": max_tokens,
        "seed": seed,
        "temperature": float(temperature),
        "stop": _stop_list(body.get("stop")),
        "stream": bool(body.get("stream", False)),
        "include_usage": bool((body.get("stream_options") or {}).get("include_usage", False)),
        "structured": _is_structured(body),
    }


def parse_prompts(body: dict) -> list[str]:
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        return prompt
    raise RequestError(
        400,
        "prompt must be a string or a non-empty list of strings (the simulator takes text only)",
    )


def render_messages(body: dict) -> str:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "messages must be a non-empty list of {role, content} objects")
    parts = []
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("content"), str):
            raise RequestError(400, "each message needs a string 'content' (text only)")
        parts.append(chatml_turn(str(m.get("role", "user")), m["content"]))
    return "".join(parts) + "<|im_start|>assistant\n"


def check_context(prompts: list[str], max_tokens: int, limit: int) -> list[int]:
    counts = []
    for p in prompts:
        n_prompt = behaviour.count_tokens(p)
        if n_prompt + max_tokens > limit:
            raise RequestError(
                400,
                f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{n_prompt + max_tokens} tokens ({n_prompt} in the messages, {max_tokens} in the "
                "completion). Please reduce the length of the messages or completion.",
            )
        counts.append(n_prompt)
    return counts


class Sequence:
    """One prompt × choice: its answer, computed up front, and its timing."""

    def __init__(self, index: int, completion: behaviour.Completion):
        self.index = index
        self.completion = completion
        self.ttft_s = 0.0
        self.e2e_s = 0.0


def choice_body(seq: Sequence, chat: bool) -> dict[str, Any]:
    c = seq.completion
    if chat:
        return {
            "index": seq.index,
            "message": {"role": "assistant", "content": c.text},
            "logprobs": None,
            "finish_reason": c.finish_reason,
            "stop_reason": None,
        }
    return {
        "index": seq.index,
        "text": c.text,
        "logprobs": None,
        "finish_reason": c.finish_reason,
        "stop_reason": None,
    }


def response_body(
    req_id: str,
    model: str,
    seqs: list[Sequence],
    prompt_tokens: int,
    chat: bool,
    shuffle: random.Random | None = None,
) -> dict[str, Any]:
    """The whole reply; ``shuffle`` returns choices out of index order (clients must map)."""
    choices = [choice_body(s, chat) for s in seqs]
    if shuffle is not None and len(choices) > 1:
        shuffle.shuffle(choices)
    completion_tokens = sum(s.completion.completion_tokens for s in seqs)
    return {
        "id": req_id,
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": SIMULATOR_OWNER,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
