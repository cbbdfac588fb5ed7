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
beside the figure at 10k: the copies are what makes it harder. How much of that is
the copies taking the evidence's places, and how much a larger index ranking the same
articles differently (document frequencies, mean length), the "copies not ranked"
rows tell: the same questions ranked by ``originals_search``, the farm's first stage
and stage 2 with the copies left out of the hits but not out of the index.

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
# How deep ``originals_search`` reads the first stage: at 1M passages one document in 92
# is an original, so its first 25 lie about 2,300 hits down.
ORIGINALS_DEPTH = 5000

UNITS: dict[str, str] = {
    "build": "s",
    "build: documents read and stored": "s",
    "build: full-text index": "s",
    "build: postings": "s",
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
    "recall@8 general.jsonl, copies not ranked": "",
    "recall@8 independent_heldout.jsonl, copies not ranked": "",
}
KINDS: dict[str, str] = {
    "build": "grows",
    "build: documents read and stored": "grows",
    "build: full-text index": "grows",
    "build: postings": "grows",
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
    "recall@8 general.jsonl, copies not ranked": "quality",
    "recall@8 independent_heldout.jsonl, copies not ranked": "quality",
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


def originals_search(retriever: Any, question: str, originals: set[str], *, top_k: int,
                     title_boost: float, depth: int = ORIGINALS_DEPTH) -> list[Any]:
    """The farm's ranking of the default corpus's own articles inside the enlarged index:
    the first stage read ``depth`` deep with every copy left out, stage 2 on the first
    ``RERANK_DEPTH`` left. The copies still weigh in the index's statistics (each term's
    document frequency, the mean length) but take no place; on the default corpus alone
    it is the farm's own ranking (the 10k point checks that)."""
    from qfarm.common.retrieval.ranking import RERANK_DEPTH, Candidate, rerank_order

    kept = [ev for ev in retriever.first_stage(question, title_boost=title_boost, depth=depth)
            if ev.doc_id in originals][:max(RERANK_DEPTH, top_k)]
    order = rerank_order(question, [Candidate(ev.score, ev.title, ev.text,
                                              lead=ev.offset_start == 0) for ev in kept], top_k)
    return [kept[i].model_copy(update={"id": f"E{rank}", "score": round(score, 6)})
            for rank, (i, score) in enumerate(order, start=1)]


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
            "build: documents read and stored": built["stages_s"].get("documents"),
            "build: full-text index": built["stages_s"].get("full-text"),
            "build: postings": built["stages_s"].get("postings"),
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
                    "recall@8 independent_heldout.jsonl": q.get("recall_heldout"),
                    "recall@8 general.jsonl, copies not ranked": q.get("originals_general"),
                    "recall@8 independent_heldout.jsonl, copies not ranked":
                        q.get("originals_heldout")})
        if docs <= len(base) and q.get("originals_differs"):
            # Without copies the two rankings must be the same, or the row measures nothing.
            raise SystemExit(f"originals_search differs from the farm's ranking on the "
                             f"default corpus for {q['originals_differs']} questions")
        print(f"passages {size:,}: {docs:,} documents -> {built['passages']:,} passages, "
              f"build {built['seconds']:.1f}s, p50 {q['p50_ms']:.2f} ms", flush=True)
        if q.get("profile"):
            print(q["profile"], flush=True)
        points[built["passages"]] = fig
        index.unlink()
    return points
