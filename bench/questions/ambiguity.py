"""How many independent questions fit another article's description as well as their own.

A question of ``independent_*.jsonl`` is the gold article's short description
(``build_independent.py``). It is *ambiguous* here when another article's
description holds every content word of it (words of four or more letters, or
numbers, as the build rule counts them): "Species of tropical fish" fits every
article described "Species of tropical freshwater fish", so no retriever can
tell which one the question means. Prints the count and embedded recall@8 on
both subsets, labelled; the headline figures in bench/README.md stay over the
whole file.

    python -m bench.questions.ambiguity [FILE]   # default: independent_tune.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.questions.build_independent import content_words
from common.gold import contains_answer, normalize_tokens
from common.questions import parse_questions
from common.settings import Settings
from worker.retrieval import ensure_default_index, open_retriever
from worker.retrieval.default_corpus import default_corpus_path

HERE = Path(__file__).resolve().parent
TOP_K = 8
TITLE_BOOST = 2.0  # the policy default


def ambiguous_titles(corpus: dict[str, dict]) -> set[str]:
    """Titles whose description's content words all occur in another article's description."""
    words = {
        (a.get("title") or k): frozenset(content_words(a.get("description") or ""))
        for k, a in corpus.items()
    }
    by_word: dict[str, set[str]] = {}
    for title, ws in words.items():
        for w in ws:
            by_word.setdefault(w, set()).add(title)
    out = set()
    for title, ws in words.items():
        if not ws:
            continue
        others = set.intersection(*(by_word[w] for w in ws)) - {title}
        if others:
            out.add(title)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", type=Path, default=HERE / "independent_tune.jsonl")
    args = ap.parse_args()
    corpus = json.loads(default_corpus_path().read_text(encoding="utf-8"))
    ambiguous = ambiguous_titles(corpus)
    questions = parse_questions(args.file.name, args.file.read_text(encoding="utf-8"))
    settings = Settings()
    ensure_default_index(settings, progress=False)
    retriever = open_retriever(settings)
    hits = {True: [0, 0], False: [0, 0]}
    try:
        for q in questions:
            evidence = retriever.search(q.text, top_k=TOP_K, title_boost=TITLE_BOOST)
            gold = [normalize_tokens(a) for a in q.answers or ()]
            found = any(contains_answer(normalize_tokens(e.text), gold) for e in evidence)
            tally = hits[q.title in ambiguous]
            tally[0] += found
            tally[1] += 1
    finally:
        retriever.close()
    for label, key in (("ambiguous (another description holds all its words)", True),
                       ("unambiguous", False)):
        found, n = hits[key]
        rate = f"{found / n:.3f}" if n else "n/a"
        print(f"{args.file.name} {label}: {n} questions, recall@{TOP_K} {rate}")
    total = sum(v[1] for v in hits.values())
    print(f"{args.file.name} all: {total} questions, recall@{TOP_K} "
          f"{sum(v[0] for v in hits.values()) / total:.3f} (the figure reported)")


if __name__ == "__main__":
    main()
