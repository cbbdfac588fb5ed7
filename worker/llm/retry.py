"""The gateway's one retry layer, as pure functions (dramatiq's ``compute_backoff`` idea).

Nothing else in qfarm retries an LLM call: Celery tasks do not retry on
``ServiceError`` and the HTTP client is built with no retries of its own, so
the attempt budget here is the whole story.

* Transient (retry, possibly elsewhere): connect errors, timeouts, dropped
  connections, 408/409/425/429, every 5xx, a 200 whose body is malformed or
  has no usable choice.
* Permanent (fail the job at once): other 4xx (400 bad request or context
  length, 401/403 key, 404 model, 413, 422).
"""

from __future__ import annotations

import email.utils
import random
import time
from dataclasses import dataclass

TRANSIENT_STATUSES = frozenset({408, 409, 425, 429})


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 4
    base_s: float = 0.25
    max_s: float = 8.0


def is_transient_status(status: int) -> bool:
    return status in TRANSIENT_STATUSES or status >= 500


def compute_backoff(attempt: int, policy: RetryPolicy, rng: random.Random | None = None) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1-based), with equal jitter.

    Equal jitter (half fixed, half random) keeps a floor under the wait, so a
    burst of failures never retries all at once and never retries at ~0 s.
    """
    ceiling = min(policy.max_s, policy.base_s * (2 ** max(attempt - 1, 0)))
    r = (rng or random).random()
    return ceiling / 2 + r * ceiling / 2


def parse_retry_after(value: str | None, now_epoch: float | None = None) -> float | None:
    """``Retry-After`` as seconds from now: delay-seconds or an HTTP-date; None if absent/bad."""
    if not value:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - (time.time() if now_epoch is None else now_epoch)
    return max(0.0, seconds) if seconds == seconds else None  # NaN guard
