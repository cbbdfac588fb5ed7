"""Retrieval figures: index build and query latency, embedded and OpenSearch (issue 6).

Embedded (SQLite FTS5): build time and passages/s for the default corpus, then
query p50/p95 over 1,000 questions (target p50 <= 10 ms), against a baseline
measured in the same run on the same index: a raw FTS5 ``MATCH`` of the same
terms without ranking or joins. OpenSearch: the same on a local osmem-server,
an in-memory stand-in, NOT a cluster figure. The last line is
``query_p50_ms=<embedded p50>``.

    python -m bench.perf.retrieval [--questions 1000] [--no-opensearch]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

TEMPLATES = ("What is {t}?", "Who was {t}?", "Tell me about {t}.", "Why is {t} important?")
TOP_K = 8
TITLE_BOOST = 2.0


def make_questions(corpus: dict[str, dict], n: int, seed: int = 7) -> list[str]:
    """Half title questions, half phrases from an article's text (no title words)."""
    rng = random.Random(seed)
    keys = sorted(corpus)
    out: list[str] = []
    for i in range(n):
        item = corpus[rng.choice(keys)]
        if i % 2 == 0:
            out.append(rng.choice(TEMPLATES).format(t=item["title"]))
        else:
            words = item["extract"].split()
            start = rng.randrange(max(1, len(words) - 12))
            out.append(" ".join(words[start : start + 12]) + "?")
    return out


def percentiles(samples_ms: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(samples_ms, n=100, method="inclusive")
    return cuts[49], cuts[94]


def time_each(fn: Callable[[str], object], questions: list[str]) -> list[float]:
    for q in questions[:20]:  # warm caches and connections
        fn(q)
    out = []
    for q in questions:
        t0 = time.perf_counter()
        fn(q)
        out.append((time.perf_counter() - t0) * 1000.0)
    return out


def bench_embedded(tmp: Path, questions: list[str]) -> tuple[float, list[str | None]]:
    from common.search_query import fts5_match_expression
    from worker.retrieval.embedded import EmbeddedRetriever
    from worker.retrieval.ingest import CorpusSource, build_embedded_index

    dest = tmp / "default.sqlite"
    report = build_embedded_index(CorpusSource.resolve("default"), dest, progress=False, force=True)
    print(
        f"embedded build: {report.elapsed_s:.2f} s for {report.documents:,} documents -> "
        f"{report.passages:,} passages ({report.passages_per_s:,.0f} passages/s)"
    )
    retriever = EmbeddedRetriever(dest)
    ranked = time_each(
        lambda q: retriever.search(q, top_k=TOP_K, title_boost=TITLE_BOOST), questions
    )
    top1 = [_top_doc(retriever.search(q, top_k=1, title_boost=TITLE_BOOST)) for q in questions]
    retriever.close()
    conn = sqlite3.connect(dest)

    def raw_match(q: str) -> object:
        expr = fts5_match_expression(q)
        sql = "SELECT rowid FROM text_fts WHERE text_fts MATCH ? LIMIT ?"
        return conn.execute(sql, (expr, TOP_K)).fetchall() if expr else []

    raw = time_each(raw_match, questions)
    conn.close()
    p50, p95 = percentiles(ranked)
    b50, b95 = percentiles(raw)
    verdict = "met" if p50 <= 10.0 else "MISSED"
    print(
        f"embedded query (BM25 title^{TITLE_BOOST:g} + text, top {TOP_K}): p50 {p50:.2f} ms, p95 {p95:.2f} ms (target p50 <= 10 ms: {verdict})"
    )
    print(f"baseline raw FTS5 MATCH, no ranking, same terms: p50 {b50:.3f} ms, p95 {b95:.3f} ms")
    print(f"ranked / raw: p50 x{p50 / b50:.1f}, p95 x{p95 / b95:.1f}")
    return p50, top1


def _top_doc(evidence: list) -> str | None:
    return evidence[0].doc_id if evidence else None


def bench_opensearch(
    questions: list[str], embedded_p50: float, embedded_top1: list[str | None]
) -> None:
    try:
        from osmem_server import OsmemServer
    except ImportError:
        print("opensearch: skipped (pip install osmem-server for the in-memory stand-in)")
        return
    from common.settings import Settings
    from worker.retrieval import open_retriever
    from worker.retrieval.ingest import CorpusSource, build_cluster_index

    label = "opensearch on osmem-server (in-memory stand-in, NOT a cluster figure)"
    with OsmemServer.start(japanese=False) as server:
        retriever = open_retriever(Settings(retriever="opensearch", es_url=server.url))
        try:
            report = build_cluster_index(retriever, CorpusSource.resolve("default"), progress=False)
            print(
                f"{label} build: {report.elapsed_s:.2f} s, {report.passages:,} passages "
                f"({report.passages_per_s:,.0f} passages/s)"
            )
            single = time_each(
                lambda q: retriever.search(q, top_k=TOP_K, title_boost=TITLE_BOOST), questions
            )
            p50, p95 = percentiles(single)
            print(
                f"{label} query over HTTP: p50 {p50:.2f} ms, p95 {p95:.2f} ms (x{p50 / embedded_p50:.1f} embedded p50)"
            )
            batch = 16
            t0 = time.perf_counter()
            for i in range(0, len(questions), batch):
                retriever.search_many(
                    questions[i : i + batch], top_k=TOP_K, title_boost=TITLE_BOOST
                )
            per_q = (time.perf_counter() - t0) * 1000.0 / len(questions)
            print(
                f"{label} _msearch x{batch}: {per_q:.2f} ms per question (x{per_q / p50:.2f} single-search p50)"
            )
            theirs = [
                _top_doc(retriever.search(q, top_k=1, title_boost=TITLE_BOOST)) for q in questions
            ]
            same = sum(a == b for a, b in zip(embedded_top1, theirs, strict=True))
            print(
                f"ranking parity: same top document as embedded for {same}/{len(questions)} "
                f"questions ({same / len(questions):.1%})"
            )
        finally:
            retriever.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=int, default=1000)
    ap.add_argument("--no-opensearch", action="store_true")
    args = ap.parse_args()

    from worker.retrieval.default_corpus import default_corpus_path

    corpus = json.loads(default_corpus_path().read_text(encoding="utf-8"))
    questions = make_questions(corpus, args.questions)
    print(
        f"retrieval benchmark: default corpus ({len(corpus):,} articles), {len(questions):,} questions, {os.cpu_count()} CPUs"
    )
    with tempfile.TemporaryDirectory(prefix="qfarm-retrieval-") as tmp:
        p50, top1 = bench_embedded(Path(tmp), questions)
    if not args.no_opensearch:
        bench_opensearch(questions, p50, top1)
    print(f"query_p50_ms={p50:.3f}")


if __name__ == "__main__":
    main()
