# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
#
# Rebuilt from vLLM 0.33.0's source (the release wheel on PyPI), licensed under the
# Apache License, Version 2.0 (https://www.apache.org/licenses/LICENSE-2.0); modified
# for qfarm's tests. Distributed on an "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS
# OF ANY KIND. Taken from:
#   vllm/entrypoints/serve/engine/protocol.py       ErrorInfo, ErrorResponse, ModelCard,
#                                                   ModelList, UsageInfo (lines 79-140)
#   vllm/entrypoints/openai/completion/protocol.py  CompletionRequest (fields 49-73,
#                                                   validators 598-664), CompletionResponse*
#                                                   and CompletionStream* (675-760)
#   vllm/entrypoints/openai/chat_completion/protocol.py  ChatMessage (76), Chat* responses
#                                                   (113-200), request fields (239-258)
#   vllm/entrypoints/generate/base/protocol.py      StopParam (26), StreamOptions (293),
#                                                   DeltaMessage (356)
#   vllm/sampling_params.py                         SamplingParams._verify_args (634-747),
#                                                   _verify_greedy_sampling (769)
#   vllm/envs.py                                    VLLM_MAX_COMPLETION_PROMPTS=1024,
#                                                   VLLM_MAX_STOP_STRINGS=4 (113-114)
"""vLLM 0.33's OpenAI protocol models, as far as the simulator speaks them.

Changes from the original: ``model_config`` forbids extra fields (vLLM allows them,
which would let a field the simulator invents pass unseen); fields the simulator
never sends (logprobs details, tool calls, KV-transfer parameters, per-request
metrics, audio) are typed ``Any``; fields several classes share sit in small
base classes (``_Request``, ``_Choice``, ``_Reply``) instead of being repeated;
the request validators raise ``ValueError``
instead of ``VLLMValidationError``. Only the checks the simulator claims to copy
are rebuilt. When vLLM changes, rebuild this file from the new wheel (docs/llm.md,
"Re-checking against a new vLLM release").
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_COMPLETION_PROMPTS = 1024
MAX_STOP_STRINGS = 4


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --------------------------------------------------------------------------- serve/engine


class ErrorInfo(Strict):
    message: str
    type: str
    param: str | None = None
    code: int


class ErrorResponse(Strict):
    error: ErrorInfo


class ModelCard(Strict):
    id: str
    object: str = "model"
    created: int
    owned_by: str = "vllm"
    root: str | None = None
    parent: str | None = None
    max_model_len: int | None = None
    permission: list[Any] = Field(default_factory=list)


class ModelList(Strict):
    object: str = "list"
    data: list[ModelCard] = Field(default_factory=list)


class UsageInfo(Strict):
    prompt_tokens: int = 0
    total_tokens: int = 0
    completion_tokens: int | None = 0
    prompt_tokens_details: Any = None
    completion_tokens_details: Any = None


# --------------------------------------------------------------------------- requests

StopParam = str | Annotated[list[str], Field(max_length=MAX_STOP_STRINGS)] | None


class StreamOptions(Strict):
    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


class _Request(BaseModel):
    """Fields and checks the completion and chat requests share."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    seed: int | None = None
    stop: StopParam = []
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    temperature: float | None = None
    top_p: float | None = None

    @model_validator(mode="before")
    @classmethod
    def validate_stream_options(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("stream_options") and not data.get("stream"):
            raise ValueError("Stream options can only be defined when `stream=True`.")
        return data


class CompletionRequest(_Request):
    """The fields qfarm sends, with vLLM's request-level validators."""

    prompt: list[int] | list[list[int]] | str | list[str] | None = None
    max_tokens: int | None = 16
    n: int = 1
    response_format: Any = None

    @model_validator(mode="before")
    @classmethod
    def validate_prompt_and_prompt_embeds(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        prompt = data.get("prompt")
        if prompt is None or (isinstance(prompt, str) and prompt == ""):
            raise ValueError("Either prompt or prompt_embeds must be provided and non-empty.")
        return data

    @model_validator(mode="before")
    @classmethod
    def validate_prompt_list_length(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        prompt = data.get("prompt")
        if (
            isinstance(prompt, list)
            and len(prompt) > 0
            and not all(isinstance(p, int) for p in prompt)
            and len(prompt) > MAX_COMPLETION_PROMPTS
        ):
            raise ValueError(
                f"prompt list length {len(prompt)} exceeds the maximum allowed count of "
                f"{MAX_COMPLETION_PROMPTS}. To increase this limit, set the "
                "VLLM_MAX_COMPLETION_PROMPTS environment variable."
            )
        return data


class ChatCompletionRequest(_Request):
    messages: list[dict[str, Any]]
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    n: int | None = 1


def verify_sampling(max_tokens: int | None, temperature: float, n: int,
                    top_p: float = 1.0) -> None:
    """The subset of ``SamplingParams._verify_args`` (and the greedy check) for these fields."""
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}.")
    if not math.isfinite(temperature):
        raise ValueError(f"temperature must be a finite number, got {temperature}.")
    if temperature < 0.0:
        raise ValueError(f"temperature must be non-negative, got {temperature}.")
    if temperature > 2.0:
        raise ValueError(f"temperature must be in [0, 2], got {temperature}.")
    if max_tokens is not None and max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}.")
    if temperature < 1e-5 and n > 1:  # _SAMPLING_EPS: greedy sampling
        raise ValueError(f"n must be 1 when using greedy sampling, got {n}.")


# --------------------------------------------------------------------------- completions


class _Choice(Strict):
    index: int
    logprobs: Any = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    token_ids: list[int] | None = None


class _Reply(Strict):
    """Fields every response and stream chunk shares."""

    id: str
    created: int
    model: str
    system_fingerprint: str | None = None
    metrics: Any = None
    kv_transfer_params: Any = None


class CompletionResponseChoice(_Choice):
    text: str
    prompt_logprobs: Any = None
    prompt_token_ids: list[int] | None = None
    routed_experts: str | None = None


class CompletionResponse(_Reply):
    object: Literal["text_completion"] = "text_completion"
    choices: list[CompletionResponseChoice]
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] | None = None
    usage: UsageInfo
    ec_transfer_params: Any = None


class CompletionResponseStreamChoice(_Choice):
    text: str
    prompt_token_ids: list[int] | None = None
    weight_versions: Any = None


class CompletionStreamResponse(_Reply):
    object: str = "text_completion"
    choices: list[CompletionResponseStreamChoice]
    usage: UsageInfo | None = None


# --------------------------------------------------------------------------- chat


class ChatMessage(Strict):
    role: str
    content: str | None = None
    refusal: str | None = None
    annotations: Any = None
    audio: Any = None
    function_call: Any = None
    tool_calls: list[Any] = Field(default_factory=list)
    reasoning: str | None = None


class ChatCompletionResponseChoice(_Choice):
    message: ChatMessage
    finish_reason: str | None = "stop"
    routed_experts: str | None = None
    weight_versions: Any = None


class ChatCompletionResponse(_Reply):
    object: Literal["chat.completion"] = "chat.completion"
    choices: list[ChatCompletionResponseChoice]
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] | None = None
    usage: UsageInfo
    prompt_logprobs: Any = None
    prompt_token_ids: list[int] | None = None
    prompt_text: str | None = None
    ec_transfer_params: Any = None


class DeltaMessage(Strict):
    role: str | None = None
    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[Any] = Field(default_factory=list)


class ChatCompletionResponseStreamChoice(_Choice):
    delta: DeltaMessage
    weight_versions: Any = None


class ChatCompletionStreamResponse(_Reply):
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    choices: list[ChatCompletionResponseStreamChoice]
    usage: UsageInfo | None = None
    prompt_token_ids: list[int] | None = None
    prompt_text: str | None = None
