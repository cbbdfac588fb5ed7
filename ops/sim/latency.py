"""Latency model: time to first token plus time per output token, with jitter.

Defaults follow the published profile of an 8B model on one H100
(llm-d-inference-sim): 60–120 ms to the first token, 10–15 ms per output
token. Each sequence draws its TTFT and its per-token time uniformly from the
ranges, so the ranges *are* the jitter. The per-token time does not grow with
the number of running sequences: the capacity (``max_num_seqs``) is the only
load effect, which keeps the ideal throughput of a server a closed formula,
``max_num_seqs / (mean TTFT + mean output tokens × mean per-token time)``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

Range = tuple[float, float]

PRESETS: dict[str, tuple[Range, Range]] = {
    "h100-8b": ((60.0, 120.0), (10.0, 15.0)),
    "zero": ((0.0, 0.0), (0.0, 0.0)),
}
DEFAULT_PRESET = "h100-8b"


def parse_range(text: str) -> Range:
    """``"90"`` → (90, 90); ``"60-120"`` → (60, 120); milliseconds, >= 0."""
    parts = [p.strip() for p in str(text).split("-")]
    try:
        values = [float(p) for p in parts if p != ""]
    except ValueError:
        raise ValueError(
            f"{text!r} is not a number of milliseconds or a range like 60-120"
        ) from None
    if len(values) == 1:
        values = values * 2
    if len(values) != 2 or values[0] < 0 or values[1] < values[0]:
        raise ValueError(f"{text!r} is not a range of milliseconds like 60-120 (low <= high, >= 0)")
    return values[0], values[1]


def format_range(r: Range) -> str:
    return f"{r[0]:g}" if r[0] == r[1] else f"{r[0]:g}-{r[1]:g}"


@dataclass(frozen=True)
class LatencyModel:
    ttft_ms: Range = PRESETS[DEFAULT_PRESET][0]
    tpot_ms: Range = PRESETS[DEFAULT_PRESET][1]

    @classmethod
    def preset(cls, name: str) -> LatencyModel:
        if name not in PRESETS:
            raise ValueError(f"unknown latency preset {name!r}; known: {sorted(PRESETS)}")
        ttft, tpot = PRESETS[name]
        return cls(ttft_ms=ttft, tpot_ms=tpot)

    @property
    def is_zero(self) -> bool:
        return self.ttft_ms == (0.0, 0.0) and self.tpot_ms == (0.0, 0.0)

    def sample(self, rng: random.Random) -> tuple[float, float]:
        """(time to first token, time per further token), in seconds, for one sequence."""
        ttft = rng.uniform(*self.ttft_ms) / 1000.0
        tpot = rng.uniform(*self.tpot_ms) / 1000.0
        return ttft, tpot

    def mean_service_s(self, mean_output_tokens: float) -> float:
        """Mean time one sequence holds a slot (the bench's ideal-throughput formula)."""
        ttft = sum(self.ttft_ms) / 2000.0
        tpot = sum(self.tpot_ms) / 2000.0
        return ttft + max(mean_output_tokens - 1, 0) * tpot
