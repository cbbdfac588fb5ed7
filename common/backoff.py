"""How long to wait before trying again: one schedule for every retry the farm makes.

The gateway's model calls (``qfarm.worker.llm.retry``) and a search cluster's rejections
(``qfarm.worker.retrieval.cluster``) back off the same way; each names its own policy.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 4
    base_s: float = 0.25
    max_s: float = 8.0


def compute_backoff(attempt: int, policy: RetryPolicy, rng: random.Random | None = None) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1-based), with equal jitter.

    Equal jitter (half fixed, half random) keeps a floor under the wait, so a
    burst of failures never retries all at once and never retries at ~0 s.
    """
    ceiling = min(policy.max_s, policy.base_s * (2 ** max(attempt - 1, 0)))
    r = (rng or random).random()
    return ceiling / 2 + r * ceiling / 2
