"""Retrieval metrics: which rank holds a gold answer / the named article, and the figures."""

from __future__ import annotations

import json

from qfarm.common.models import Evidence, Question
from qfarm.common.questions import parse_questions
from qfarm.common.retrieval.evaluation import (
    judge,
    misses,
    percentile_pair,
    summarize,
    titles_by_id,
)
from tests.common.passages import passage


def ev(rank: int, title: str, text: str) -> Evidence:
    return passage(rank, title, text, chunk_id=f"{title}#0")


EVIDENCE = [
    ev(1, "Atlas Mountains", "A mountain range in North Africa."),
    ev(2, "Mount Kilimanjaro", "Kilimanjaro is the highest mountain in Africa."),
    ev(3, "Kilimanjaro (band)", "Kilimanjaro is also a band."),
]


def test_judge_finds_the_first_passage_with_an_answer_and_the_article_rank() -> None:
    q = Question(id="q", text="What is the highest mountain in Africa?", answers=("kilimanjaro",))
    j = judge(q, "Mount Kilimanjaro", EVIDENCE)
    assert (j.answer_rank, j.article_rank, j.has_answers, j.has_title) == (2, 2, True, True)
    # Token match: "Kilimanjar" is not in the evidence, and no title means no article rank.
    miss = judge(Question(id="m", text="?", answers=("Kilimanjar",)), None, EVIDENCE)
    assert (miss.answer_rank, miss.article_rank, miss.has_title) == (None, None, False)


def test_summary_recall_hit_mrr_and_percentiles() -> None:
    qs = [
        Question(id="a", text="a", answers=("Kilimanjaro",)),  # rank 2
        Question(id="b", text="b", answers=("North Africa",)),  # rank 1
        Question(id="c", text="c", answers=("Everest",)),  # miss
        Question(id="d", text="d"),  # no answers: counts for nothing but latency
    ]
    titles = {"a": "Mount Kilimanjaro", "c": "Mount Everest"}
    judged = [judge(q, titles.get(q.id), EVIDENCE) for q in qs]
    fig = summarize(judged, [1.0, 2.0, 3.0, 4.0], top_k=3)
    assert fig["with_answers"] == 3 and fig["with_titles"] == 2
    assert fig["recall_at_k"] == round(2 / 3, 4)
    assert fig["mrr"] == round((1 / 2 + 1) / 3, 4)
    assert fig["article_hit_at_k"] == 0.5 and fig["article_top1"] == 0.0
    assert fig["latency_p50_ms"] == 2.5
    assert misses(qs, judged) == [{"id": "c", "question": "c"}]
    empty = summarize([], [], top_k=8)
    assert (empty["recall_at_k"], empty["mrr"], empty["article_hit_at_k"]) == (None, None, None)
    assert percentile_pair([7.0]) == (7.0, 7.0)


def test_titles_come_from_the_jsonl_lines_by_id() -> None:
    lines = [
        "# a comment",
        json.dumps({"id": "x", "question": "Q1?", "answers": ["A"], "title": "T1"}),
        json.dumps({"question": "Q2?", "answers": ["B"]}),
    ]
    content = "\n".join(lines) + "\n"
    questions = parse_questions("f.jsonl", content)
    assert titles_by_id(questions) == {"x": "T1"}
    assert titles_by_id(parse_questions("f.txt", "Who?\n")) == {}
