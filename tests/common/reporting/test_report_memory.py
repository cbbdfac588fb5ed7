"""The summary's pass over the rows keeps bounded memory: a structural check (tracemalloc's
peak over 2k and 20k rows of the same questions), not a timing one."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from typing import Any

from qfarm.common.reporting.runstats import accumulate

MODES = ("quote", "claim_lattice_pointer", "claim_lattice")
VERDICTS = ("STRICT", "HYBRID", "UNGROUNDED")


def rows(count: int, questions: int = 100) -> Iterator[dict[str, Any]]:
    """``count`` rows over ``questions`` questions, made one at a time (never held)."""
    for k in range(count):
        q = k % questions
        yield {
            "job_id": f"job{k:08d}", "question_id": f"q{q}", "question": f"Question {q}?",
            "mode": MODES[k % 3], "sample_index": k // (3 * questions),
            "verdict": VERDICTS[(k // 3) % 3], "label": "UNGROUNDED", "ratio": (k % 5) / 4,
            "n_claims": 2, "violation_kinds": ["CITATION_MISMATCH"] if k % 7 == 0 else [],
            "endpoint": f"http://sim{k % 2}:8000", "error": None, "attempts": 1,
            "timings": {"total_ms": 100.0 + k % 997, "llm_ms": 80.0 + k % 113,
                        "retrieval_ms": 1.0 + k % 7, "verify_ms": 2.0, "queue_wait_ms": 3.0},
            "usage": {"prompt_tokens": 800, "completion_tokens": 60 + k % 40},
            # requests that overlap, as a busy endpoint's do: their in-flight union is one span
            "llm_request": {"sent_at": 1_700_000_000.0 + k / 100, "ms": 80.0 + k % 113, "prompts": 1},
            "started_at": 1_700_000_000.0 + k, "finished_at": 1_700_000_000.5 + k,
        }


def peak_bytes(count: int) -> int:
    tracemalloc.start()
    try:
        stats = accumulate(rows(count))
        assert stats.rows == count
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_ten_times_larger_run_does_not_take_ten_times_the_memory() -> None:
    small, large = peak_bytes(2_000), peak_bytes(20_000)
    # The latency sketches are exact up to a few thousand values, then bounded buckets:
    # the larger run may hold a little more, never in proportion to its rows.
    assert large < 2 * small, (small, large)
