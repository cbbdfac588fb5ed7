"""The one back-off schedule (model calls and search rejections)."""

from __future__ import annotations

import random

from qfarm.common.backoff import RetryPolicy, compute_backoff


def test_backoff_grows_exponentially_with_equal_jitter() -> None:
    policy = RetryPolicy(base_s=0.5, max_s=100.0)
    rng = random.Random(0)
    for attempt in range(1, 6):
        ceiling = 0.5 * 2 ** (attempt - 1)
        waits = [compute_backoff(attempt, policy, rng) for _ in range(200)]
        assert min(waits) >= ceiling / 2
        assert max(waits) <= ceiling
        assert max(waits) - min(waits) > ceiling / 4  # jittered, not constant


def test_backoff_is_capped() -> None:
    policy = RetryPolicy(base_s=1.0, max_s=3.0)
    assert all(compute_backoff(20, policy) <= 3.0 for _ in range(50))
