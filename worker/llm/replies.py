"""Fitting a prompt into an endpoint's context window, and what a reply becomes: a
``Generation`` with the budget the answer really had (a batch's usage shared out)."""

from __future__ import annotations

import time

from qfarm.common.models import Generation, LlmRequest, Sampling, Usage
from qfarm.worker.llm.balancer import EndpointState
from qfarm.worker.llm.batcher import BatchItem
from qfarm.worker.llm.client import Choice, Reply

# Characters per token assumed when estimating a prompt's size: Llama-3's tokenizer averages
# ~4 on English prose, so 3 over-estimates the tokens and under-estimates what is left.
CHARS_PER_TOKEN_ESTIMATE = 3
# Characters per token assumed when a server's reply has no ``usage``: Llama-3's average
# on English prose, so run totals come out near the truth (rows say they are estimates).
CHARS_PER_TOKEN_USAGE = 4


def estimate_tokens(prompt: str) -> int:
    """A conservative (high) estimate of a prompt's token count, plus one for BOS."""
    return -(-len(prompt) // CHARS_PER_TOKEN_ESTIMATE) + 1


def fit_context(prompt: str, sampling: Sampling, max_model_len: int | None) -> Sampling:
    """``sampling`` with ``max_tokens`` lowered when the estimated prompt leaves less room.

    A prompt estimated to fill the whole window is sent unchanged: the estimate is high on
    purpose, so only the server can say it does not fit (a ContextOverflowError then).
    """
    if max_model_len is None:
        return sampling
    room = max_model_len - estimate_tokens(prompt)
    if room >= sampling.max_tokens or room < 1:
        return sampling
    return sampling.model_copy(update={"max_tokens": room})


def _effective_max_tokens(
    asked: int, sent: Sampling, usage: Usage, max_model_len: int | None
) -> int | None:
    """The token budget the answer really had, when lower than the policy's ``max_tokens``."""
    budget = sent.max_tokens
    if max_model_len is not None and usage.prompt_tokens is not None:
        # vLLM lowers max_tokens to what the window leaves, without saying so.
        budget = min(budget, max_model_len - usage.prompt_tokens)
    return budget if budget < asked else None


def with_estimate(usage: Usage, prompt: str, completion: str) -> Usage:
    """``usage`` with the counts the server did not give estimated from characters, and
    flagged ``estimated`` (never silently)."""
    if usage.prompt_tokens is not None and usage.completion_tokens is not None:
        return usage

    def guess(text: str) -> int:
        return -(-len(text) // CHARS_PER_TOKEN_USAGE)

    return Usage(
        prompt_tokens=guess(prompt) if usage.prompt_tokens is None else usage.prompt_tokens,
        completion_tokens=(guess(completion) if usage.completion_tokens is None
                           else usage.completion_tokens),
        estimated=True,
    )


def to_generation(
    choice: Choice,
    reply: Reply,
    ep: EndpointState,
    attempts: int,
    started: float,
    usage: Usage,
    asked_max_tokens: int,
    sent: Sampling,
    prompt: str,
    prompts: int = 1,
) -> Generation:
    """A reply's choice as a job's ``Generation``; ``prompts``: how many the request carried."""
    request = None
    if reply.sent_at is not None:
        request = LlmRequest(sent_at=reply.sent_at, ms=round(reply.elapsed_ms, 3), prompts=prompts)
    return Generation(
        text=choice.text,
        finish_reason=choice.finish_reason,
        truncated=choice.finish_reason == "length",
        max_tokens_effective=_effective_max_tokens(
            asked_max_tokens, sent, reply.usage, ep.max_model_len
        ),
        endpoint=ep.target.display,
        attempts=attempts,
        usage=with_estimate(usage, prompt, choice.text),
        request=request,
        llm_ms=round((time.perf_counter() - started) * 1000.0, 3),
        ttft_ms=round(reply.ttft_ms, 3) if reply.ttft_ms is not None else None,
        simulated=reply.simulated,
        server=ep.server,
    )


def split_usage(reply: Reply, items: list[BatchItem]) -> list[Usage]:
    """Per-prompt share of a batch's summed usage, in proportion to characters (an estimate:
    vLLM reports usage per request, not per prompt)."""
    total_p, total_c = reply.usage.prompt_tokens, reply.usage.completion_tokens
    p_chars = [len(i.prompt) for i in items]
    c_chars = [len(reply.choices[k].text) if k in reply.choices else 0 for k in range(len(items))]

    def share(total: int | None, chars: list[int], k: int) -> int | None:
        if total is None:
            return None
        whole = sum(chars)
        return round(total * chars[k] / whole) if whole else round(total / len(chars))

    return [
        Usage(
            prompt_tokens=share(total_p, p_chars, k), completion_tokens=share(total_c, c_chars, k)
        )
        for k in range(len(items))
    ]


def _apportion(total: int, weights: list[int]) -> list[int]:
    """``total`` split in proportion to ``weights`` (evenly when they are all 0), in whole
    numbers that sum to ``total`` exactly (largest remainders first)."""
    k = len(weights)
    whole = sum(weights)
    exact = [total * w / whole for w in weights] if whole else [total / k] * k
    parts = [int(x) for x in exact]
    by_remainder = sorted(range(k), key=lambda i: (parts[i] - exact[i], i))
    for i in by_remainder[: total - sum(parts)]:
        parts[i] += 1
    return parts


def split_shared_usage(usage: Usage, texts: list[str], prompt: str) -> list[Usage]:
    """Each choice's share of a shared request's usage (one prompt, ``n`` choices): the
    prompt was read once, so its tokens are split evenly among the choices; the completion
    tokens (vLLM sums them over the choices) in proportion to each choice's characters.
    The shares sum to the server's counts, so the cost table counts the prompt once. A
    server that gave no prompt count gets the prompt's estimate shared the same way (the
    rows say it is estimated)."""
    k = len(texts)
    prompt_total, estimated = usage.prompt_tokens, False
    if prompt_total is None:
        prompt_total, estimated = -(-len(prompt) // CHARS_PER_TOKEN_USAGE), True
    prompt_shares = _apportion(prompt_total, [1] * k)
    completion = (None if usage.completion_tokens is None
                  else _apportion(usage.completion_tokens, [len(t) for t in texts]))
    return [
        Usage(prompt_tokens=prompt_shares[j],
              completion_tokens=None if completion is None else completion[j],
              estimated=estimated)
        for j in range(k)
    ]
