"""Recall of qfarm and of the naive index on two splits of an independent set.

A question of ``independent_*.jsonl`` is the gold article's short description
(``build_independent.py``), which nobody chose for its words. Two rules, each
reading only the corpus package (not qfarm's ranking), split the questions:

* **worded**: every content word of the description (words of four or more
  letters, or numbers, as the build rule counts them) occurs in the gold
  article's own title or text, a word counting when an article word starts
  with its root (one of "-ing", "-ed", "-es", "-s" dropped: "mountains" finds
  "mountain"). "Mountain in Tanzania, highest in Africa" is worded for *Mount
  Kilimanjaro*; "Fully grown animal" is not for *Adult*, whose text says
  "mature". A ranking of the question's own words can find a worded
  question's article; for the rest it needs another word for the same thing.
* **ambiguous**: another article's description holds every content word of
  it: "Species of tropical fish" fits every article described "Species of
  tropical freshwater fish", so no retriever can tell which one the question
  means.

Prints recall@8 (the gold answer in the top 8) of the embedded index and of
the naive single-table index (``bench.perf.retrieval``) on each part,
labelled; the headline figures in bench/README.md stay over the whole file.

    python -m bench.questions.strata [FILE]   # default: independent_heldout.jsonl
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench.questions.build_independent import content_words
from qfarm.common.models import Question
from qfarm.common.questions import parse_questions
from qfarm.common.retrieval.evaluation import judge

HERE = Path(__file__).resolve().parent
TOP_K = 8
TITLE_BOOST = 2.0  # the policy default
_WORD = re.compile(r"[^\W_]+")
_SUFFIXES = ("ing", "ed", "es", "s")


def root(word: str) -> str:
    """``word`` without one light suffix, keeping at least three letters."""
    # The same strip as stage 2's, written again on purpose: the split must not
    # move when the ranking's matching changes (nor be tuned through it).
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def worded_titles(corpus: dict[str, dict]) -> set[str]:
    """Titles whose description's content words all occur in their own title or text."""
    out = set()
    for key, article in corpus.items():
        title = article.get("title") or key
        wanted = {root(w) for w in content_words(article.get("description") or "")}
        if not wanted:
            continue
        words = set(_WORD.findall(f"{title} {article.get('extract') or ''}".lower()))
        if all(any(w.startswith(r) for w in words) for r in wanted):
            out.add(title)
    return out


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


def found(retriever: Any, question: Question) -> bool:
    """Whether a gold answer is in the top 8, judged as ``qfarm eval-retrieval`` judges it."""
    evidence = retriever.search(question.text, top_k=TOP_K, title_boost=TITLE_BOOST)
    return judge(question, question.title, evidence).answer_rank is not None


def split_recall(
    hits: dict[str, bool], questions: Iterable[Question], part: set[str]
) -> tuple[tuple[int, float | None], tuple[int, float | None]]:
    """(n, recall) of the questions whose title is in ``part``, then of the others."""
    inside = [hits[q.id] for q in questions if q.title in part]
    outside = [hits[q.id] for q in questions if q.title not in part]
    return (
        (len(inside), sum(inside) / len(inside) if inside else None),
        (len(outside), sum(outside) / len(outside) if outside else None),
    )


def print_strata(
    name: str, questions: list[Question], corpus: dict[str, dict], retrievers: dict[str, Any]
) -> dict[str, float | None]:
    """One line per split and retriever: n and recall@8 on each side; then, on the worded
    part, the questions the first retriever answers and the second misses, and the reverse.
    Returns each retriever's recall on the worded part."""
    hits = {label: {q.id: found(r, q) for q in questions} for label, r in retrievers.items()}
    splits = (
        ("worded (the article holds every description word)", "the rest", worded_titles(corpus)),
        (
            "ambiguous (another description holds all its words)",
            "the rest",
            ambiguous_titles(corpus),
        ),
    )
    for label_in, label_out, part in splits:
        for label, h in hits.items():
            (n_in, r_in), (n_out, r_out) = split_recall(h, questions, part)
            print(
                f"{name} {label:<8} {label_in}: {n_in} questions, recall@{TOP_K} {_rate(r_in)}; "
                f"{label_out}: {n_out}, {_rate(r_out)}"
            )
    if len(hits) == 2:
        (a, ha), (b, hb) = hits.items()
        worded = {q.id for q in questions if q.title in splits[0][2]}
        only_a = sorted(i for i in worded if ha[i] and not hb[i])
        only_b = sorted(i for i in worded if hb[i] and not ha[i])
        print(
            f"{name} worded: {a} answers {len(only_a)} that {b} misses, {b} answers "
            f"{len(only_b)} that {a} misses {' '.join(only_b)}".rstrip()
        )
    for label, h in hits.items():
        print(
            f"{name} {label:<8} all: {len(h)} questions, recall@{TOP_K} {_rate(sum(h.values()) / len(h))}"
        )
    return {label: split_recall(h, questions, splits[0][2])[0][1] for label, h in hits.items()}


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def main() -> None:
    from bench.perf.retrieval import NaiveRetriever, build_naive_index
    from qfarm.common.settings import Settings
    from qfarm.worker.retrieval import ensure_default_index, open_retriever
    from qfarm.worker.retrieval.default_corpus import default_corpus_path

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", type=Path, default=HERE / "independent_heldout.jsonl")
    args = ap.parse_args()
    corpus = json.loads(default_corpus_path().read_text(encoding="utf-8"))
    questions = parse_questions(args.file.name, args.file.read_text(encoding="utf-8"))
    settings = Settings()
    index = ensure_default_index(settings, progress=False)
    retriever = open_retriever(settings)
    with tempfile.TemporaryDirectory(prefix="qfarm-strata-") as tmp:
        naive_path = Path(tmp) / "naive.sqlite"
        build_naive_index(index, naive_path)
        naive = NaiveRetriever(naive_path)
        try:
            print_strata(args.file.name, questions, corpus, {"qfarm": retriever, "naive": naive})
        finally:
            retriever.close()
            naive.close()


if __name__ == "__main__":
    main()
