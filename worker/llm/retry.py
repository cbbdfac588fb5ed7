"""The gateway's one retry layer, as pure functions (the back-off schedule itself,
dramatiq's ``compute_backoff`` idea, is ``qfarm.common.backoff``, shared with the search
backends).

Nothing else in qfarm retries an LLM call: Celery tasks do not retry on
``ServiceError`` and the HTTP client is built with no retries of its own, so
the attempt budget here is the whole story.

* Transient (retry, possibly elsewhere): connect errors, timeouts, dropped
  connections, 408/409/425/429, 5xx other than 501/505, a 200 whose body is
  malformed or has no usable choice, an error event inside a stream with a
  transient code, a choice that finished other than ``stop``/``length``.
* Permanent (fail the job at once): other 4xx (400 bad request, validation or
  context length, 401/403 key, 404 model, 413, 422) and 501/505 (vLLM answers
  501 for a feature it does not implement: asking again cannot help).

Each kind is a class in ``qfarm.common.errors`` (``LLMConnectError``, ``BackPressureError``,
``ContextOverflowError``…); the gateway and the balancer match on the class.

``Retry-After`` is honoured up to a cap (``QFARM_LLM_RETRY_AFTER_MAX_S``): a
server, or a proxy in front of it, cannot park an endpoint for longer than
that, whatever it sends (a huge number, ``inf``, a date decades away).
"""

from __future__ import annotations

import email.utils
import time

TRANSIENT_STATUSES = frozenset({408, 409, 425, 429})
PERMANENT_5XX = frozenset({501, 505})
DEFAULT_RETRY_AFTER_MAX_S = 60.0


def is_transient_status(status: int) -> bool:
    return status in TRANSIENT_STATUSES or (status >= 500 and status not in PERMANENT_5XX)


def parse_retry_after(
    value: str | None,
    now_epoch: float | None = None,
    cap_s: float = DEFAULT_RETRY_AFTER_MAX_S,
) -> float | None:
    """``Retry-After`` as seconds from now, at most ``cap_s``: delay-seconds or an HTTP-date.

    None if absent or unreadable; an absurd value (huge, ``inf``, a far date) is the cap.
    """
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
    if seconds != seconds:  # NaN
        return None
    return min(max(0.0, seconds), max(0.0, cap_s))
