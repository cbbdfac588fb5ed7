"""Run a question file through a retriever and judge the evidence (``qfarm eval-retrieval``).

One ``search`` per question, timed on the wall clock around the call, so the
latency figures include what a job pays (an HTTP round trip on clusters). Every timed
search is cold: a retriever that remembers searches (the embedded index's cache) forgets
them first, so neither the warm-up nor a question asked twice times a cache hit. The
rates carry 95% Wilson intervals (the questions are independent draws).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from qfarm.common.models import Question
from qfarm.common.reporting.stats import wilson_interval
from qfarm.common.retrieval.evaluation import Judged, judge, misses, summarize

WARM_UP = 10  # untimed searches first: connections, page cache


def evaluate(
    retriever: Any,
    questions: Sequence[Question],
    titles: Mapping[str, str],
    *,
    top_k: int,
    title_boost: float,
) -> dict[str, Any]:
    """Figures of ``retriever`` on ``questions`` (see ``qfarm.common.retrieval.evaluation.summarize``)."""
    for q in questions[:WARM_UP]:
        retriever.search(q.text, top_k=top_k, title_boost=title_boost)
    forget: Callable[[], None] = getattr(retriever, "forget_searches", lambda: None)
    judged: list[Judged] = []
    latencies: list[float] = []
    for q in questions:
        forget()
        t0 = time.perf_counter()
        evidence = retriever.search(q.text, top_k=top_k, title_boost=title_boost)
        latencies.append((time.perf_counter() - t0) * 1000.0)
        judged.append(judge(q, titles.get(q.id), evidence))
    figures = summarize(judged, latencies, top_k)
    return {
        "backend": retriever.backend,
        "index_version": retriever.index_version(),
        **figures,
        "recall_at_k_ci95": _interval(judged, "answer_rank", figures["with_answers"]),
        "article_hit_at_k_ci95": _interval(judged, "article_rank", figures["with_titles"]),
        "timed_searches": len(latencies),
        "misses": misses(questions, judged),
    }


def _interval(judged: Sequence[Judged], rank: str, n: int) -> list[float] | None:
    """The 95% Wilson interval of the share of the ``n`` questions with a gold answer
    (``answer_rank``) or a named article (``article_rank``) that found it in the top k."""
    if not n:
        return None
    has = "has_answers" if rank == "answer_rank" else "has_title"
    hits = sum(getattr(j, rank) is not None for j in judged if getattr(j, has))
    low, high = wilson_interval(hits, n)
    return [round(low, 4), round(high, 4)]
