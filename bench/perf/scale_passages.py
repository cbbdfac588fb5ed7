"""The passages half of ``bench.perf.scale``: the embedded index at 10k, 100k, 1M passages.

Enlarged corpora are written from the default corpus (``enlarged_corpus``): its
articles in their order, then again and again as copies. Copy ``c`` (c >= 1) of an
article keeps its text's length and sentences but replaces each word, with
probability ``WORD_SWAP`` (a generator seeded by the copy number and the title), by a
word drawn from every word of the corpus's texts, so the copies' terms keep the
corpus's frequency distribution (a common word is drawn as often as it occurs). Its
title keeps each word with probability 1 - ``WORD_SWAP`` (else one drawn from all
titles' words) and gains one word drawn from all titles' words: "Pride and
Prejudice" becomes e.g. "Pride and Prejudice Apollo", a near-namesake distractor
holding most of the answer's words, the hard case of a large corpus. The questions'
articles (copy 0) are all in every corpus, so recall@8 at 100k and 1M is read
beside the figure at 10k: the copies are what makes it harder.

Each build and each query pass runs in a child process (peak RSS its own).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.perf.scale_children import spawn

WORD_SWAP = 0.2

UNITS: dict[str, str] = {
    "build": "s",
    "build passages/s": "",
    "index size on disk": "MB",
    "build peak RSS": "MB",
    "query p50": "ms",
    "query p95": "ms",
    "query p50, FTS5 first stage": "ms",
    "query p95, FTS5 first stage": "ms",
    "query process peak RSS": "MB",
    "recall@8 general.jsonl": "",
    "recall@8 independent_heldout.jsonl": "",
}
KINDS: dict[str, str] = {
    "build": "grows",
    "build passages/s": "rate",
    "index size on disk": "grows",
    "build peak RSS": "flat",
    "query p50": "grows",
    "query p95": "grows",
    "query p50, FTS5 first stage": "grows",
    "query p95, FTS5 first stage": "grows",
    "query process peak RSS": "flat",
    "recall@8 general.jsonl": "quality",
    "recall@8 independent_heldout.jsonl": "quality",
}


def load_default() -> dict[str, dict[str, Any]]:
    from qfarm.worker.retrieval.default_corpus import default_corpus_path

    data: dict[str, dict[str, Any]] = json.loads(default_corpus_path().read_text(encoding="utf-8"))
    return data


def passages_per_article(base: dict[str, dict[str, Any]]) -> float:
    from qfarm.common.retrieval.chunking import chunk_document

    total = sum(len(chunk_document(k, v.get("title") or k, v["extract"])) for k, v in base.items()
                if v.get("extract"))
    return total / max(1, len(base))


def perturbed(title: str, text: str, copy: int, words: list[str],
              title_words: list[str]) -> tuple[str, str]:
    """Copy ``copy`` of an article (0: the article itself); see the module docstring."""
    if copy == 0:
        return title, text
    rng = random.Random(f"{copy}\x1f{title}")
    new_text = " ".join(rng.choice(words) if rng.random() < WORD_SWAP else w
                        for w in text.split(" "))
    new_title = [rng.choice(title_words) if rng.random() < WORD_SWAP else w
                 for w in title.split()]
    return " ".join([*new_title, rng.choice(title_words)]), new_text


def enlarged_corpus(base: dict[str, dict[str, Any]], documents: int) -> Iterator[dict[str, str]]:
    """``documents`` corpus records: the default corpus, then its perturbed copies."""
    items = [(v.get("title") or k, v["extract"]) for k, v in base.items() if v.get("extract")]
    words = [w for _, text in items for w in text.split()]
    title_words = [w for title, _ in items for w in title.split()]
    for i in range(documents):
        copy, (title, text) = divmod(i, len(items))[0], items[i % len(items)]
        new_title, new_text = perturbed(title, text, copy, words, title_words)
        yield {"id": f"{title}#{copy}" if copy else title, "title": new_title, "text": new_text}


def write_corpus(base: dict[str, dict[str, Any]], passages: int, path: Path,
                 ratio: float) -> int:
    """A JSONL corpus of about ``passages`` passages (``ratio`` passages an article);
    returns its document count."""
    documents = max(1, round(passages / ratio))
    if documents >= 0.9 * len(base):  # "10k" is the whole default corpus (10,887 passages)
        documents = max(documents, len(base))
    with path.open("w", encoding="utf-8") as fh:
        for record in enlarged_corpus(base, documents):
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
    return documents


def measure(sizes: list[int], work: Path, *, queries: int, heldout: int,
            profile: bool) -> dict[int, dict[str, float | None]]:
    from qfarm.worker.retrieval.default_corpus import default_corpus_path

    base = load_default()
    ratio = passages_per_article(base)
    points: dict[int, dict[str, float | None]] = {}
    for size in sizes:
        corpus = work / f"corpus-{size}.jsonl"
        index = work / f"index-{size}.sqlite"
        docs = write_corpus(base, size, corpus, ratio)
        built = spawn("build", str(corpus), str(index))
        corpus.unlink()
        fig: dict[str, float | None] = {
            "build": built["seconds"],
            "build passages/s": built["passages"] / built["seconds"],
            "index size on disk": index.stat().st_size / 2**20,
            "build peak RSS": built["rss_mb"],
        }
        last = size == sizes[-1]
        q = spawn("query", str(index), str(default_corpus_path()), str(queries), str(heldout),
                  "profile" if profile and last else "")
        fig.update({"query p50": q["p50_ms"], "query p95": q["p95_ms"],
                    "query p50, FTS5 first stage": q["fts5_p50_ms"],
                    "query p95, FTS5 first stage": q["fts5_p95_ms"],
                    "query process peak RSS": q["rss_mb"],
                    "recall@8 general.jsonl": q.get("recall_general"),
                    "recall@8 independent_heldout.jsonl": q.get("recall_heldout")})
        print(f"passages {size:,}: {docs:,} documents -> {built['passages']:,} passages, "
              f"build {built['seconds']:.1f}s, p50 {q['p50_ms']:.2f} ms", flush=True)
        if q.get("profile"):
            print(q["profile"], flush=True)
        points[built["passages"]] = fig
        index.unlink()
    return points
