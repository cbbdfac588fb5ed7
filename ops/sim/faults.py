"""Fault injection: HTTP failures at set rates, or forced for the next requests.

Kinds, and what the client sees:

============  ================================================================
queue_full    ``503`` with vLLM's admission-control error (``--max-num-queued-reqs``
              reached): type ``Service Unavailable``, "The engine is currently
              busy and cannot accept new requests. ..."; no Retry-After (vLLM
              never sends one)
429           the *proxy* fault: ``429 Too Many Requests`` with ``Retry-After:
              <retry_after_s>``, as a rate-limiting proxy in front of vLLM sends
              (vLLM itself never answers 429)
503           ``503 Service Unavailable`` without vLLM's envelope: a server or
              proxy with no live engine behind it
timeout       the request is accepted and never answered (client read timeout)
drop          the connection is closed without a response
malformed     ``200`` with a body that is not valid JSON
empty         ``200`` with ``"choices": []``
stream_error  streaming: part of the answer, then vLLM's error event
              (``data: {"error": {... "code": 500}}``) and ``[DONE]``; without
              streaming the ``500`` vLLM answers for a failed generation
abort         the choice ends with ``finish_reason: "abort"`` after part of the
              answer (vLLM aborted the request engine-side)
huge          ``200`` whose answer is 50 MB of text, far past any ``max_tokens``
              (a broken or hostile server); streamed as one enormous event
============  ================================================================

queue_full/429/503/timeout/drop happen on arrival, before the request queues
for a slot (as a proxy or an overloaded engine would); the rest happen during
or after the generation, so they cost the server the same time as a good
answer. Forced
faults (``POST /sim/faults {"next": ["429", "drop"]}``) are consumed in
arrival order before the rates are consulted. ``down`` makes every request and
``/health`` answer 503 until cleared, like a dead engine.
"""

from __future__ import annotations

import random
import threading
from collections import deque
from dataclasses import dataclass, field

FAULT_KINDS: tuple[str, ...] = (
    "queue_full", "429", "503", "timeout", "drop", "malformed", "empty", "stream_error", "abort",
    "huge",
)  # fmt: skip
HUGE_ANSWER_BYTES = 50 << 20
ARRIVAL_FAULTS = frozenset({"queue_full", "429", "503", "timeout", "drop"})


def check_rates(rates: dict[str, float]) -> dict[str, float]:
    unknown = sorted(set(rates) - set(FAULT_KINDS))
    if unknown:
        raise ValueError(f"unknown fault kind(s) {unknown}; known: {list(FAULT_KINDS)}")
    clean = {k: float(v) for k, v in rates.items()}
    if any(v < 0 for v in clean.values()) or sum(clean.values()) > 1.0 + 1e-9:
        raise ValueError(f"fault rates must be >= 0 and sum to at most 1 (got {clean})")
    return clean


@dataclass
class FaultInjector:
    """Decides, per request, which fault (if any) to inject. Thread-safe."""

    rates: dict[str, float] = field(default_factory=dict)
    retry_after_s: float = 1.0
    hang_s: float = 3600.0
    down: bool = False
    seed: int | None = None
    _forced: deque[str] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rates = check_rates(self.rates)
        self._rng = random.Random(self.seed)

    def draw(self) -> str | None:
        with self._lock:
            if self.down:
                return "503"
            if self._forced:
                return self._forced.popleft()
            u = self._rng.random()
            acc = 0.0
            for kind in FAULT_KINDS:
                acc += self.rates.get(kind, 0.0)
                if u < acc:
                    return kind
            return None

    def update(self, payload: dict) -> None:
        """Apply a ``POST /sim/faults`` body; unknown keys are an error."""
        known = {"rates", "next", "retry_after_s", "hang_s", "down", "clear_next"}
        unknown = sorted(set(payload) - known)
        if unknown:
            raise ValueError(f"unknown field(s) {unknown}; known: {sorted(known)}")
        with self._lock:
            if "rates" in payload:
                self.rates = check_rates(dict(payload["rates"] or {}))
            if payload.get("clear_next"):
                self._forced.clear()
            for kind in payload.get("next") or ():
                if kind not in FAULT_KINDS:
                    raise ValueError(f"unknown fault kind {kind!r}; known: {list(FAULT_KINDS)}")
                self._forced.append(kind)
            if "retry_after_s" in payload:
                self.retry_after_s = float(payload["retry_after_s"])
            if "hang_s" in payload:
                self.hang_s = float(payload["hang_s"])
            if "down" in payload:
                self.down = bool(payload["down"])

    def snapshot(self) -> dict:
        with self._lock:
            return {
                "rates": dict(self.rates),
                "next": list(self._forced),
                "retry_after_s": self.retry_after_s,
                "hang_s": self.hang_s,
                "down": self.down,
            }
