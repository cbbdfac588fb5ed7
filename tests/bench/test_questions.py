"""The question sets parse, are the shape they claim, and are grounded in the default corpus."""

from __future__ import annotations

import json
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest

from qfarm.common.grounding.gold import contains_answer, normalize_tokens
from qfarm.common.grounding.quantifier import classify_question_quantifier
from qfarm.common.grounding.sidecar import match_extraction_shape
from qfarm.common.models import Question
from qfarm.common.questions import parse_questions
from qfarm.worker.retrieval.default_corpus import default_corpus_path

QUESTIONS = Path(__file__).resolve().parents[2] / "bench" / "questions"
BROAD_RUNGS = {"ALL", "MANY", "COMPREHENSIVE", "OPEN_REQUEST"}


def load(name: str) -> list[Question]:
    return parse_questions(name, (QUESTIONS / name).read_text(encoding="utf-8"))


def records(name: str) -> list[dict]:
    lines = (QUESTIONS / name).read_text(encoding="utf-8").splitlines()
    return [json.loads(ln) for ln in lines if ln.strip() and not ln.startswith("#")]


@cache
def corpus() -> dict[str, dict]:
    return json.loads(default_corpus_path().read_text(encoding="utf-8"))


def test_every_question_file_parses() -> None:
    files = sorted(p.name for p in QUESTIONS.iterdir() if p.suffix in (".txt", ".jsonl"))
    assert {"smoke.txt", "general.jsonl", "quantifier_subset.txt", "answerability.jsonl"} <= set(
        files
    )
    for name in files:
        assert load(name), name


def test_smoke_is_small_with_a_few_broad_questions() -> None:
    questions = load("smoke.txt")
    assert 10 <= len(questions) <= 20
    broad = [q for q in questions if classify_question_quantifier(q.text).is_broad]
    assert 2 <= len(broad) <= len(questions) // 2


def test_general_covers_the_corpus_topics_with_gold_answers() -> None:
    questions = load("general.jsonl")
    recs = records("general.jsonl")
    assert len(questions) >= 100
    assert sum(1 for q in questions if q.answers) >= 100
    topics = {r["topic"] for r in recs}
    assert len(topics) >= 10  # the corpus has 12 topics (one is "Uncategorized")


@pytest.mark.parametrize(
    "name",
    ["general.jsonl", "answerability.jsonl", "independent_tune.jsonl", "independent_heldout.jsonl"],
)
def test_gold_answers_are_verbatim_in_the_named_article(name: str) -> None:
    articles = corpus()
    missing = []
    for rec in records(name):
        if not rec.get("answers"):
            continue
        article = articles.get(rec["title"])
        assert article is not None, f"{rec['id']}: no article titled {rec['title']!r} in the corpus"
        text = normalize_tokens(article["extract"])
        for answer in rec["answers"]:
            # Short answers only: the repository must not carry corpus text.
            assert len(normalize_tokens(answer)) <= 10, f"{rec['id']}: answer too long: {answer!r}"
            if not contains_answer(text, [normalize_tokens(answer)]):
                missing.append((rec["id"], answer))
    assert missing == []


def test_answerability_questions_are_extraction_shaped() -> None:
    questions = load("answerability.jsonl")
    assert len(questions) >= 20
    not_shaped = [
        q.text
        for q in questions
        if match_extraction_shape(q.text, classify_question_quantifier(q.text))[0] is None
    ]
    assert not_shaped == []
    assert all(q.answers for q in questions)


def test_quantifier_subset_spans_broad_rungs_bounded_and_unbounded() -> None:
    seen: dict[str, set[str]] = defaultdict(set)
    for q in load("quantifier_subset.txt"):
        info = classify_question_quantifier(q.text)
        assert info.is_broad, f"not broad: {q.text!r} ({info.intensity})"
        seen[info.intensity].add(info.scope_bound_hint)
    assert set(seen) == BROAD_RUNGS
    assert all(scopes == {"bounded", "unbounded"} for scopes in seen.values()), dict(seen)


def test_independent_sets_are_what_their_script_builds_and_do_not_overlap() -> None:
    from bench.questions.build_independent import SPLITS, build

    built = build(corpus(), per_split=1000)
    for name, rows in zip(SPLITS, built, strict=True):
        assert records(name) == rows, f"{name} differs from its script's output; rerun it"
        assert len(rows) >= 500
        assert all(r["question"].startswith(("What is the ", "What was the ", "Who was the ")) for r in rows)
    tune, heldout = ({r["title"] for r in rows} for rows in built)
    assert not tune & heldout
    # The question never contains its answer (it would be found by string match alone).
    for r in built[0] + built[1]:
        assert not contains_answer(normalize_tokens(r["question"]), [normalize_tokens(r["answers"][0])])


def test_named_set_is_what_its_script_builds_and_names_each_answer() -> None:
    from bench.questions.build_independent import NAMED, answer_for, build_named

    rows = build_named(corpus(), 1000)
    assert records(NAMED) == rows, f"{NAMED} differs from its script's output; rerun it"
    assert len(rows) == 1000
    answers = [answer_for(a.get("title") or k).lower() for k, a in corpus().items()]
    for r in rows:
        # The question names its answer as written, and no other article has that answer.
        assert r["answers"][0] in r["question"], r
        assert answers.count(r["answers"][0].lower()) == 1, r
        text = corpus()[r["title"]]["extract"]
        assert contains_answer(normalize_tokens(text), [normalize_tokens(r["answers"][0])]), r
    shapes = {r["question"].split(r["answers"][0])[1][:6] for r in rows}
    assert len(shapes) >= 4, shapes  # several templates, not one


def test_a_description_is_ambiguous_when_another_holds_all_its_content_words() -> None:
    from bench.questions.strata import ambiguous_titles

    corpus = {
        "Guppy": {"title": "Guppy", "description": "Species of tropical fish"},
        "Neon tetra": {"title": "Neon tetra", "description": "Species of tropical freshwater fish"},
        "Cod": {"title": "Cod", "description": "Species of cold-water fish"},
        "Mars": {"title": "Mars", "description": ""},
    }
    # Every content word of Guppy's description is in Neon tetra's, not the reverse;
    # Cod's "cold" and "water" are in no other description; no description, no claim.
    assert ambiguous_titles(corpus) == {"Guppy"}


def test_a_description_is_worded_when_its_own_article_holds_every_content_word() -> None:
    from bench.questions.strata import root, worded_titles

    corpus = {
        "Mount Kilimanjaro": {
            "title": "Mount Kilimanjaro",
            "description": "Mountain in Tanzania, highest in Africa",
            "extract": "Mount Kilimanjaro is a dormant volcano in Tanzania. It is the highest "
            "mountain in Africa.",
        },
        # "grown" is not in the text: the question needs another word for it.
        "Adult": {
            "title": "Adult",
            "description": "Fully grown animal",
            "extract": "An adult is a human or other animal that has reached full maturity.",
        },
        # A plural in the description finds the singular in the text, and a
        # number must occur as written.
        "Chess": {
            "title": "Chess",
            "description": "Board game for two players (1475)",
            "extract": "Chess is a board game between two player sides.",
        },
        "Mars": {"title": "Mars", "description": "", "extract": "Mars is a planet."},
    }
    assert root("mountains") == "mountain" and root("players") == "player" and root("gas") == "gas"
    assert worded_titles(corpus) == {"Mount Kilimanjaro"}
    corpus["Chess"]["description"] = "Board game for two players"
    assert worded_titles(corpus) == {"Mount Kilimanjaro", "Chess"}
