"""Run a question file through a retriever and judge the evidence (``qfarm eval-retrieval``).

One ``search`` per question, timed on the wall clock around the call, so the
latency figures include what a job pays (an HTTP round trip on clusters).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from qfarm.common.models import Question
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
    judged: list[Judged] = []
    latencies: list[float] = []
    for q in questions:
        t0 = time.perf_counter()
        evidence = retriever.search(q.text, top_k=top_k, title_boost=title_boost)
        latencies.append((time.perf_counter() - t0) * 1000.0)
        judged.append(judge(q, titles.get(q.id), evidence))
    return {
        "backend": retriever.backend,
        "index_version": retriever.index_version(),
        **summarize(judged, latencies, top_k),
        "misses": misses(questions, judged),
    }
