"""Retrieval quality figures: recall@k, article hit@k, MRR and latency percentiles.

Pure: judges evidence that a backend already returned. A question counts for
recall and MRR when it has gold ``answers`` (matched as in ``qfarm.common.grounding.gold``: a
gold answer's tokens occur contiguously in a passage), and for article hit@k
when its JSONL line names the article (``title``), compared with each
passage's title.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from qfarm.common.grounding.gold import contains_answer, normalize_tokens
from qfarm.common.models import Evidence, Question


@dataclass(frozen=True)
class Judged:
    """Where the first passage holding a gold answer / from the named article ranks (1-based)."""

    answer_rank: int | None
    article_rank: int | None
    has_answers: bool
    has_title: bool


def titles_by_id(questions: Sequence[Question]) -> dict[str, str]:
    """The ``title`` each JSONL question line gave, by question id (``{}`` for a text file)."""
    return {q.id: q.title for q in questions if q.title}


def judge(question: Question, title: str | None, evidence: Sequence[Evidence]) -> Judged:
    gold = [t for t in (normalize_tokens(a) for a in question.answers or ()) if t]
    answer_rank = next(
        (
            rank
            for rank, ev in enumerate(evidence, start=1)
            if gold and contains_answer(normalize_tokens(ev.text), gold)
        ),
        None,
    )
    article_rank = next(
        (rank for rank, ev in enumerate(evidence, start=1) if title and ev.title == title), None
    )
    return Judged(answer_rank, article_rank, bool(gold), bool(title))


def percentile_pair(samples_ms: Sequence[float]) -> tuple[float, float]:
    """(p50, p95) of latencies; one sample is its own percentile."""
    if not samples_ms:
        return (0.0, 0.0)
    if len(samples_ms) == 1:
        return (samples_ms[0], samples_ms[0])
    cuts = statistics.quantiles(samples_ms, n=100, method="inclusive")
    return (cuts[49], cuts[94])


def summarize(judged: Sequence[Judged], latencies_ms: Sequence[float], top_k: int) -> dict[str, Any]:
    """Figures of one backend on one question file (``None`` where no question qualifies)."""
    answered = [j for j in judged if j.has_answers]
    titled = [j for j in judged if j.has_title]
    p50, p95 = percentile_pair(latencies_ms)

    def rate(hits: int, n: int) -> float | None:
        return round(hits / n, 4) if n else None

    return {
        "questions": len(judged),
        "top_k": top_k,
        "with_answers": len(answered),
        "recall_at_k": rate(sum(j.answer_rank is not None for j in answered), len(answered)),
        "mrr": (
            round(sum(1.0 / j.answer_rank for j in answered if j.answer_rank) / len(answered), 4)
            if answered
            else None
        ),
        "with_titles": len(titled),
        "article_hit_at_k": rate(sum(j.article_rank is not None for j in titled), len(titled)),
        "article_top1": rate(sum(j.article_rank == 1 for j in titled), len(titled)),
        "latency_p50_ms": round(p50, 3),
        "latency_p95_ms": round(p95, 3),
    }


def misses(
    questions: Sequence[Question], judged: Sequence[Judged], limit: int = 20
) -> list[dict[str, str]]:
    """The first questions whose evidence holds no gold answer (for a person to read)."""
    out = [
        {"id": q.id, "question": q.text}
        for q, j in zip(questions, judged, strict=True)
        if j.has_answers and j.answer_rank is None
    ]
    return out[:limit]
