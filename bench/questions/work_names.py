"""Does a work's name change the quantifier classifier's rung? Measured two ways.

1. ``named_works.jsonl`` (written before the classifier read names; its misses shaped
   the rules) and ``named_works_heldout.jsonl`` (written afterwards, never used to
   change them): questions naming a work whose name holds a quantifier word, each
   with the rung its own frame asks for.
2. Every question of the shipped sets that names a work of the default corpus (an
   article whose short description names a kind of work with its maker or year:
   "1929 novel by Erich Maria Remarque"). The truth needs no label: the same
   question with the work's name replaced by a made-up one ("Zorblax"). A false
   positive is a question whose rung differs from its made-up twin's, a broad one
   a question that is broad while its twin is not.

    python -m bench.questions.work_names          # prints both tables
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

from qfarm.common.grounding.names import TitleSet
from qfarm.common.grounding.quantifier import classify_question_quantifier
from qfarm.worker.retrieval.default_corpus import default_corpus_path

HERE = Path(__file__).resolve().parent
LABELLED = ("named_works.jsonl", "named_works_heldout.jsonl")
# Files that hold questions; denial_phrasings holds answers to six questions.
SHIPPED = (
    "general.jsonl", "independent_named.jsonl", "independent_tune.jsonl",
    "independent_heldout.jsonl", "answerability.jsonl", "real_model.jsonl",
    "bounded_universal.jsonl", "quantifier_phrasings.jsonl", "smoke.txt", "local_smoke.txt",
    "quantifier_subset.txt",
)  # fmt: skip
_WORK_NOUNS = re.compile(
    r"\b(?:novel|novella|film|painting|song|album|opera|play|poem|symphony|book|sculpture|"
    r"ballet|musical|epic|treatise|short story|fresco|concerto|oratorio|manga|video game|"
    r"sitcom|fairy tale|tragedy|comedy|mural|statue|essay|requiem|cantata|television series)\b",
    re.IGNORECASE,
)
_MADE = re.compile(r"\bby\b|\battributed to\b|^\d{3,4}s?\b")
_PARENTHETICAL = re.compile(r"\s*\([^)]*\)\s*$")
TWIN = "Zorblax"


def load_corpus() -> dict[str, dict]:
    return json.loads(default_corpus_path().read_text(encoding="utf-8"))


def corpus_titles(corpus: dict[str, dict]) -> TitleSet:
    return TitleSet(doc["title"] for doc in corpus.values())


def work_names(corpus: dict[str, dict]) -> list[str]:
    """Names of the corpus's works, longest first (a longer name wins where two overlap)."""
    names = {
        _PARENTHETICAL.sub("", doc["title"])
        for doc in corpus.values()
        if _WORK_NOUNS.search(doc.get("description") or "")
        and _MADE.search(doc.get("description") or "")
    }
    return sorted(names, key=len, reverse=True)


def questions(name: str) -> Iterator[str]:
    for line in (HERE / name).read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        yield json.loads(line)["question"] if name.endswith(".jsonl") else line


def score_labelled(titles: TitleSet | None) -> dict[str, tuple[int, int]]:
    out = {}
    for name in LABELLED:
        rows = [json.loads(line) for line in (HERE / name).read_text().splitlines()
                if line.strip() and not line.startswith("#")]  # fmt: skip
        right = sum(
            classify_question_quantifier(r["question"], titles).intensity.value == r["intensity"]
            for r in rows
        )
        out[name] = (right, len(rows))
    return out


def score_shipped(titles: TitleSet | None, names: list[str]) -> tuple[int, int, int]:
    """(questions naming a work, rung changed by the name, made broad by the name)."""
    patterns = [(n, re.compile(r"(?<![\w'-])" + re.escape(n) + r"(?![\w'-])", re.IGNORECASE))
                for n in names]  # fmt: skip
    naming = changed = broad = 0
    seen: set[str] = set()
    for name in SHIPPED:
        for question in questions(name):
            if question in seen:
                continue
            seen.add(question)
            hit = next((p for _, p in patterns if p.search(question)), None)
            if hit is None:
                continue
            naming += 1
            got = classify_question_quantifier(question, titles)
            twin = classify_question_quantifier(hit.sub(TWIN, question), titles)
            changed += got.intensity != twin.intensity
            broad += got.is_broad and not twin.is_broad
    return naming, changed, broad


def main() -> None:
    corpus = load_corpus()
    titles = corpus_titles(corpus)
    names = work_names(corpus)
    print(f"{len(names)} works in the default corpus; {titles.size} titles of two words or more")
    print("| set | without titles | with the corpus's titles |")
    print("|---|---|---|")
    bare, full = score_labelled(None), score_labelled(titles)
    for name in LABELLED:
        (a, n), (b, _) = bare[name], full[name]
        print(f"| {name} | {a} / {n} | {b} / {n} |")
    print()
    print("| shipped questions naming a work | rung changed by the name | made broad by the name |")
    print("|---|---|---|")
    for label, t in (("without titles", None), ("with the corpus's titles", titles)):
        naming, changed, broad = score_shipped(t, names)
        print(f"| {naming} ({label}) | {changed} ({changed / max(naming, 1):.3f}) | "
              f"{broad} ({broad / max(naming, 1):.3f}) |")  # fmt: skip


if __name__ == "__main__":
    main()
