"""The simulator's side of vLLM's OpenAI-compatible protocol: request parsing, reply bodies.

Mirrors vLLM 0.33 where the farm depends on it (docs/llm.md lists the source lines):

* errors use the ``{"error": {"message", "type", "param", "code"}}`` envelope; an
  unknown model is a 404;
* rejected with 400 as vLLM does: ``max_tokens`` < 1, ``temperature`` outside
  [0, 2], ``top_p`` outside (0, 1] (llama.cpp's server refuses it too), ``n`` > 1 with greedy sampling, more than 4 stop strings, an empty
  prompt, ``stream_options`` without ``stream``, more than 1024 prompts, a
  structured-output field vLLM's backend cannot compile (``constraints.py``). Checks
  vLLM makes while validating the request body answer with type ``Bad Request``
  and a "1 validation error" message (the simulator's text after that line is
  shorter than pydantic's); sampling checks answer with ``BadRequestError``;
* ``/v1/completions``: ``max_tokens`` defaults to 16; chat: ``max_completion_tokens``
  wins over ``max_tokens``, and without either the answer may use the whole
  context window;
* context: a prompt longer than ``max_model_len``, or ``max_tokens`` above it, is a
  400; when each fits but the sum does not, ``max_tokens`` is silently lowered to
  what the window leaves (``finish_reason: length`` when that bites);
* choices carry ``index = prompt_i * n + j`` and ``usage`` is summed over the request;
* ``priority`` (an integer, lower is served earlier) orders the waiting sequences of a
  server started with ``--scheduling-policy priority``; under ``fcfs`` (the default) a
  ``priority`` other than 0 is a 400, "Got priority N but Priority scheduling is not
  enabled." (vLLM's engines before the V1 rewrite; vLLM 0.33 accepts and ignores it,
  docs/llm.md, 'Interactive requests first').
"""

from __future__ import annotations

import math
import random
import time
from typing import Any

from aiohttp import web

from qfarm.common.grounding.prompts import chatml_turn
from qfarm.ops.sim import SIMULATOR_OWNER, behaviour
from qfarm.ops.sim.config import SimConfig
from qfarm.ops.sim.constraints import Constraint, ConstraintError, parse_constraint

MAX_COMPLETION_PROMPTS = 1024  # vLLM's VLLM_MAX_COMPLETION_PROMPTS default
MAX_STOP_STRINGS = 4  # vLLM's VLLM_MAX_STOP_STRINGS default
GREEDY_EPS = 1e-5  # below this temperature vLLM samples greedily (_SAMPLING_EPS)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # vLLM's bounds of "priority"
QUEUE_FULL_MESSAGE = (
    "The engine is currently busy and cannot accept new requests. "
    "Please try again later or on a different instance."
)


class RequestError(Exception):
    """A request the server refuses, rendered as vLLM's error envelope."""

    def __init__(
        self,
        status: int,
        message: str,
        err_type: str = "BadRequestError",
        param: str | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.err_type = err_type
        self.param = param


def error_body(status: int, message: str, err_type: str, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": err_type, "param": param, "code": status}}


def error_response(
    status: int, message: str, err_type: str, param: str | None = None
) -> web.Response:
    return web.json_response(error_body(status, message, err_type, param), status=status)


def body_invalid(param: str, message: str) -> RequestError:
    """A check vLLM runs while validating the request body (FastAPI's 400 handler)."""
    return RequestError(400, f"1 validation error:\n  Value error, {message}", "Bad Request", param)


def sampling_invalid(param: str | None, message: str, value: Any = None) -> RequestError:
    """A check of vLLM's SamplingParams (``VLLMValidationError``, rendered with its extras)."""
    extras = [f"parameter={param}"] if param else []
    if value is not None:
        extras.append(f"value={value}")
    text = f"{message} ({', '.join(extras)})" if extras else message
    return RequestError(400, text, "BadRequestError", param)


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
        if len(value) > MAX_STOP_STRINGS:
            raise RequestError(
                400,
                "1 validation error:\n  List should have at most "
                f"{MAX_STOP_STRINGS} items after validation, not {len(value)}",
                "Bad Request",
                "stop",
            )
        return value
    raise RequestError(400, f"stop must be a string or a list of strings (got {value!r})")


def _constraint(body: dict) -> Constraint | None:
    try:
        return parse_constraint(body)
    except ConstraintError as exc:
        raise RequestError(400, str(exc), "BadRequestError", exc.param) from exc


def _check_top_p(top_p: Any) -> None:
    """vLLM's range for ``top_p`` (the farm pins 1.0; llama.cpp's server refuses it too)."""
    if top_p is None:
        return
    if isinstance(top_p, bool) or not isinstance(top_p, int | float):
        raise RequestError(400, f"top_p must be a number (got {top_p!r})")
    if not 0.0 < top_p <= 1.0:  # NaN fails this too
        raise sampling_invalid("top_p", f"top_p must be in (0, 1], got {float(top_p)}.", top_p)


def _priority(body: dict, policy: str) -> int:
    """The request's ``priority`` (default 0), refused unless the server orders by it."""
    value = body.get("priority", 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise body_invalid("priority", f"priority must be an integer (got {value!r})")
    if not INT64_MIN <= value <= INT64_MAX:
        raise body_invalid("priority", f"priority must fit in 64 bits (got {value})")
    if value != 0 and policy != "priority":
        raise RequestError(400, f"Got priority {value} but Priority scheduling is not enabled.")
    return value


def parse_params(
    body: dict, config: SimConfig, rng: random.Random, chat: bool = False
) -> dict[str, Any]:
    """Sampling parameters, checked in vLLM's order: the request body, then the model name,
    then SamplingParams. ``max_tokens`` None means "whatever the context window leaves"."""
    stop = _stop_list(body.get("stop"))
    if body.get("stream_options") and not body.get("stream"):
        raise body_invalid(
            "stream_options", "Stream options can only be defined when `stream=True`."
        )
    model = body.get("model") or config.model
    if model not in config.accepted_models():
        raise RequestError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
    n = _int(body, "n", 1, 1)
    if chat and body.get("max_completion_tokens") is not None:
        max_tokens = _int(body, "max_completion_tokens", None, 0)
    elif "max_tokens" in body and body["max_tokens"] is None:
        max_tokens = None  # an explicit null: vLLM lets the answer fill the window
    else:
        max_tokens = _int(body, "max_tokens", None if chat else 16, 0)
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise RequestError(400, f"seed must be an integer (got {seed!r})")
    temperature = body.get("temperature", 1.0)
    if temperature is None:
        temperature = 1.0
    if isinstance(temperature, bool) or not isinstance(temperature, int | float):
        raise RequestError(400, f"temperature must be a number (got {temperature!r})")
    if not math.isfinite(temperature) or temperature < 0 or temperature > 2:
        raise sampling_invalid(
            "temperature", f"temperature must be in [0, 2], got {float(temperature)}.", temperature
        )
    _check_top_p(body.get("top_p"))
    if max_tokens is not None and max_tokens < 1:
        raise sampling_invalid(
            "max_tokens", f"max_tokens must be at least 1, got {max_tokens}.", max_tokens
        )
    if temperature < GREEDY_EPS and n is not None and n > 1:
        raise sampling_invalid(None, f"n must be 1 when using greedy sampling, got {n}.")
    priority = _priority(body, config.scheduling_policy)
    if seed is None:
        seed = rng.getrandbits(31)  # vLLM without a seed is not reproducible either
    return {
        "model": model,
        "n": n,
        "max_tokens": max_tokens,
        "seed": seed,
        "temperature": float(temperature),
        "stop": stop,
        "stream": bool(body.get("stream", False)),
        "include_usage": bool((body.get("stream_options") or {}).get("include_usage", False)),
        "constraint": _constraint(body),
        "priority": priority,
    }


def parse_prompts(body: dict) -> list[str]:
    prompt = body.get("prompt")
    if prompt is None or prompt == "":
        raise body_invalid(
            "prompt", "Either prompt or prompt_embeds must be provided and non-empty."
        )
    if isinstance(prompt, list) and len(prompt) > MAX_COMPLETION_PROMPTS:
        raise body_invalid(
            "prompt",
            f"prompt list length {len(prompt)} exceeds the maximum allowed count of "
            f"{MAX_COMPLETION_PROMPTS}. To increase this limit, set the "
            "VLLM_MAX_COMPLETION_PROMPTS environment variable.",
        )
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        return prompt
    raise RequestError(
        400,
        "prompt must be a string or a non-empty list of strings (the simulator takes text only)",
    )


def _message_text(content: Any) -> str:
    """A message's text: a string, or a list of ``{"type": "text", "text": ...}`` parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        for p in content
    ):
        return "\n".join(p["text"] for p in content)  # vLLM joins text parts with newlines
    raise RequestError(
        400, "each message needs a string 'content' or a list of text parts (text only)"
    )


def render_messages(body: dict) -> str:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "messages must be a non-empty list of {role, content} objects")
    parts = []
    for m in messages:
        if not isinstance(m, dict):
            raise RequestError(400, "each message must be a {role, content} object")
        parts.append(chatml_turn(str(m.get("role", "user")), _message_text(m.get("content"))))
    return "".join(parts) + "<|im_start|>assistant\n"


def check_context(
    prompts: list[str], max_tokens: int | None, limit: int, param: str = "max_tokens"
) -> list[tuple[int, int]]:
    """(prompt tokens, effective max_tokens) per prompt, as vLLM 0.33 decides them.

    A prompt longer than the window, or ``max_tokens`` above it, is refused; otherwise
    ``max_tokens`` is lowered, silently, to what the prompt leaves of the window.
    """
    if max_tokens is not None and max_tokens > limit:
        raise RequestError(
            400,
            f"{param}={max_tokens} cannot be greater than max_model_len={limit}. "
            "Please request fewer output tokens.",
            "BadRequestError",
            param,
        )
    out = []
    for p in prompts:
        n_prompt = behaviour.count_tokens(p)
        if n_prompt > limit:
            raise RequestError(
                400,
                f"This model's maximum context length is {limit} tokens. However, your prompt "
                f"contains {n_prompt} input tokens, which exceeds this limit even without any "
                "output tokens. Please reduce the length of the input prompt.",
                "BadRequestError",
                "input_tokens",
            )
        budget = limit - n_prompt if max_tokens is None else min(max_tokens, limit - n_prompt)
        if budget < 1:  # vLLM passes the lowered 0 on to SamplingParams, which refuses it
            raise sampling_invalid(
                "max_tokens", f"max_tokens must be at least 1, got {budget}.", budget
            )
        out.append((n_prompt, budget))
    return out


class Sequence:
    """One prompt × choice: its answer, computed up front, and its timing."""

    def __init__(self, index: int, completion: behaviour.Completion, priority: int = 0):
        self.index = index
        self.completion = completion
        self.priority = priority  # waiting sequences are served by (priority, arrival)
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
