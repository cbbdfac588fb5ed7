"""The cost model behind ``--latency cost``: what a continuous-batching server charges.

Pure: figures and formulas only; ``engine.py`` spends them on the event loop.

One engine *step* is one forward pass over every running sequence: it prefills the
prompt tokens admitted in that step that the prefix cache did not serve, and decodes one
token for each sequence already running. Its time, to first order::

    step_s = decode_step_ms + decode_ms_per_seq × sequences in the step
             + prefill_ms_per_token × uncached prompt tokens in the step

``decode_step_ms`` is the pass's fixed cost (reading the weights once: decode is
memory-bound, so a batch of 64 costs little more than a batch of one);
``decode_ms_per_seq`` is what each sequence adds (mostly reading its KV cache).
Prefill is compute-bound, so it is charged per token.

Defaults: Llama-3.1-8B (BF16) on one H100 SXM, approximations from public figures
(docs/llm.md, 'The cost model' lists them and their sources):

* weights 16 GB read per step at 3.35 TB/s (H100 SXM HBM3) ≈ 4.8 ms, plus kernel and
  scheduling overhead: 6 ms per step;
* KV cache of Llama-3.1-8B (32 layers, 8 KV heads, head dim 128, BF16): 128 KiB per
  token, so a sequence with ~1,500 tokens of context adds ~0.06 ms of reads per step;
  64 running sequences give ~10 ms per output token and 128 give ~14 ms, the 10–15 ms
  of the published 8B-on-H100 profile the ``h100-8b`` preset uses;
* prefill: 2 × 8 GFLOP per token at about half of the H100's ~989 dense BF16 TFLOPS is
  ~0.03 ms; 0.04 ms per token (25,000 tokens/s) puts a 1,500-token prompt's first
  token at ~66 ms, inside the preset's 60–120 ms;
* prefix cache: 25,000 blocks of 16 tokens (400,000 tokens ≈ 50 GB of KV cache: 80 GB
  × 0.9 memory utilization, less the weights and activations).

``time_scale`` multiplies every sleep and nothing else: the seconds *charged* (the
metrics) stay model seconds, so a benchmark can run at 1/20 of real time.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from qfarm.ops.sim.prefix_cache import BLOCK_SIZE


@dataclass(frozen=True)
class CostModel:
    prefill_ms_per_token: float = 0.04
    decode_step_ms: float = 6.0
    decode_ms_per_seq: float = 0.06
    prefix_cache_blocks: int = 25_000  # 0: prefix caching off (vllm --no-enable-prefix-caching)
    block_size: int = BLOCK_SIZE
    time_scale: float = 1.0

    def __post_init__(self) -> None:
        bad = [f.name for f in fields(self) if getattr(self, f.name) < 0]
        bad += [n for n in ("block_size", "time_scale") if getattr(self, n) <= 0 and n not in bad]
        if bad:
            values = ", ".join(f"{n}={getattr(self, n):g}" for n in bad)
            raise ValueError(
                f"cost model: {values} out of range: times and the cache size must be >= 0, "
                "the block size >= 1 and the time scale > 0"
            )

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def step_seconds(self, prefill_tokens: int, sequences: int) -> float:
        """Model seconds of one step that prefills ``prefill_tokens`` uncached prompt tokens
        and runs ``sequences`` sequences (those prefilled in it included)."""
        if prefill_tokens <= 0 and sequences <= 0:
            return 0.0
        ms = (
            self.decode_step_ms
            + self.decode_ms_per_seq * sequences
            + self.prefill_ms_per_token * prefill_tokens
        )
        return ms / 1000.0

    def prefill_seconds(self, prefill_tokens: int) -> float:
        """The prefill share of a step: what the prefix cache saves per token it serves."""
        return self.prefill_ms_per_token * prefill_tokens / 1000.0


__all__ = ["CostModel"]
