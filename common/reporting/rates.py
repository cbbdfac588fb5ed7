"""Rates over a sliding window of counter samples (the progress bar's per-stage rates).

A rate over the whole run since some start reads 0/s for a stage that was already busy
when the first sample came, and lags behind a run whose pace changes; the window says
how fast each counter moved over the last few seconds.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

WINDOW_S = 10.0


class RateWindow:
    """Counters sampled at times; ``rates()`` is each counter's rise per second between
    the oldest sample still inside the window and the newest."""

    def __init__(self, window_s: float = WINDOW_S) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be positive, got {window_s}")
        self.window_s = window_s
        self._samples: deque[tuple[float, dict[str, int]]] = deque()

    def add(self, t: float, counts: Mapping[str, int]) -> None:
        self._samples.append((t, dict(counts)))
        # Keep one sample at or before the window's start, so the window is always spanned.
        while len(self._samples) > 2 and self._samples[1][0] <= t - self.window_s:
            self._samples.popleft()

    def rates(self) -> dict[str, float]:
        """Empty until two samples span some time: one sample says nothing of a pace
        (a run that ends before its second report would read 0/s everywhere)."""
        if not self._samples:
            return {}
        t1, last = self._samples[-1]
        t0, first = self._samples[0]
        span = t1 - t0
        if span <= 0:
            return {}
        return {k: max(0, v - first.get(k, 0)) / span for k, v in last.items()}
