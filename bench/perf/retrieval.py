"""Retrieval figures: quality and latency of qfarm's ranking against a naive baseline.

Embedded (SQLite FTS5): build time and passages/s for the default corpus, then
query p50/p95 over 1,000 generated questions (target p50 <= 10 ms), against
two baselines measured in the same run: a raw FTS5 ``MATCH`` of the same terms
without ranking or joins, and the **naive single-table index** (one FTS5 table
holding title and text, porter tokenizer, ``ORDER BY bm25(t, 2.0, 1.0)``, the
same passages and query terms). Recall@8, article hit@8 and p50 of qfarm's
ranking and of the naive index on the independent held-out questions
(``bench/questions/independent_heldout.jsonl``) print side by side, whole and
split as ``bench.questions.strata`` splits it; bars:
qfarm's p50 <= 1.5x the naive p50. OpenSearch: a real node started here
(``qfarm.ops.search.launch``; skipped with one line without Java 17+ and
Maven): indexing rate, query p50/p95 interleaved with the embedded index,
``_msearch``, the node's CPU per search, top-1 parity with embedded, each
difference put in a category (``parity_breakdown``), and its held-out quality.
The last line is ``query_p50_ms=<embedded p50>``. Retrieval alone, called directly: a run through ``producer.run_sweep`` would add the rest.

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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

TEMPLATES = ("What is {t}?", "Who was {t}?", "Tell me about {t}.", "Why is {t} important?")
TOP_K = 8
TITLE_BOOST = 2.0
HELDOUT = Path(__file__).resolve().parents[1] / "questions" / "independent_heldout.jsonl"
NAIVE_SQL = (
    "SELECT doc_id, chunk_id, title, text, offset_start, offset_end, bm25(t, 2.0, 1.0) AS s"
    " FROM t WHERE t MATCH ? ORDER BY s LIMIT ?"
)


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


def time_interleaved(
    fa: Callable[[str], object],
    fb: Callable[[str], object],
    questions: list[str],
    warm_up: int = 20,
) -> tuple[list[float], list[float]]:
    """Latencies of two searches on each question, alternating which runs first.

    Interleaving gives both the same machine load (other work on shared cores
    comes and goes), so their ratio means something even when absolute times drift.
    The first ``warm_up`` questions are searched once untimed first (0: a search that
    caches per question would then be timed on questions it has seen).
    """
    for q in questions[:warm_up]:
        fa(q)
        fb(q)
    out_a: list[float] = []
    out_b: list[float] = []
    for i, q in enumerate(questions):
        pair = ((fa, out_a), (fb, out_b)) if i % 2 == 0 else ((fb, out_b), (fa, out_a))
        for fn, out in pair:
            t0 = time.perf_counter()
            fn(q)
            out.append((time.perf_counter() - t0) * 1000.0)
    return out_a, out_b


def build_naive_index(source: Path, dest: Path) -> None:
    """The naive baseline: the passages of the qfarm index ``source`` in one plain FTS5 table."""
    conn = sqlite3.connect(dest)
    conn.execute(
        "CREATE VIRTUAL TABLE t USING fts5(title, text, doc_id UNINDEXED, chunk_id UNINDEXED,"
        " offset_start UNINDEXED, offset_end UNINDEXED, tokenize='porter')"
    )
    conn.execute("ATTACH DATABASE ? AS src", (str(source),))
    conn.execute(
        "INSERT INTO t SELECT title, text, doc_id, chunk_id, offset_start, offset_end"
        " FROM src.passages ORDER BY rowid"
    )
    conn.commit()
    conn.execute("DETACH DATABASE src")
    conn.execute("INSERT INTO t(t) VALUES('optimize')")  # as qfarm's index: a fair latency bar
    conn.commit()
    conn.close()


class NaiveRetriever:
    """Search of the naive index with qfarm's query terms (``fts5_match_expression``)."""

    backend = "naive-fts5"

    def __init__(self, path: Path):
        self._conn = sqlite3.connect(path)

    def search(self, question: str, *, top_k: int, title_boost: float) -> list[Any]:
        from qfarm.common.models import Evidence
        from qfarm.common.retrieval.query import fts5_match_expression

        expr = fts5_match_expression(question)
        rows = self._conn.execute(NAIVE_SQL, (expr, top_k)).fetchall() if expr else []
        return [
            Evidence(id=f"E{i}", doc_id=d, chunk_id=c, title=t, text=x, score=-s,
                     offset_start=a, offset_end=b)
            for i, (d, c, t, x, a, b, s) in enumerate(rows, start=1)
        ]

    def index_version(self) -> str:
        return "naive"

    def close(self) -> None:
        self._conn.close()


def quality(retrievers: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """recall@8, article hit@8, MRR and p50 of each retriever on the held-out questions."""
    from qfarm.common.questions import parse_questions
    from qfarm.common.retrieval.evaluation import titles_by_id
    from qfarm.worker.retrieval.evaluate import evaluate

    content = HELDOUT.read_text(encoding="utf-8")
    questions = parse_questions(HELDOUT.name, content)
    titles = titles_by_id(questions)
    out = {}
    for r in retrievers:
        fig = evaluate(r, questions, titles, top_k=TOP_K, title_boost=TITLE_BOOST)
        out[r.backend] = fig
        print(
            f"{r.backend:<11} on {HELDOUT.name} ({fig['with_answers']} questions, run one after "
            "the other: compare latency in the interleaved lines): "
            f"recall@{TOP_K} {fig['recall_at_k']:.3f}, article hit@{TOP_K} "
            f"{fig['article_hit_at_k']:.3f}, MRR {fig['mrr']:.3f}, p50 {fig['latency_p50_ms']:.2f} ms"
        )
    return out


def bench_embedded(
    tmp: Path, questions: list[str], corpus: dict[str, dict]
) -> tuple[float, list[str | None], list[list[str]]]:
    from bench.questions.strata import print_strata
    from qfarm.common.questions import parse_questions
    from qfarm.common.retrieval.query import fts5_match_expression
    from qfarm.worker.retrieval.embedded import EmbeddedRetriever
    from qfarm.worker.retrieval.ingest import CorpusSource, build_embedded_index

    dest = tmp / "default.sqlite"
    report = build_embedded_index(CorpusSource.resolve("default"), dest, progress=False, force=True)
    print(
        f"embedded build: {report.elapsed_s:.2f} s for {report.documents:,} documents -> "
        f"{report.passages:,} passages ({report.passages_per_s:,.0f} passages/s)"
    )
    naive_path = tmp / "naive.sqlite"
    build_naive_index(dest, naive_path)
    retriever = EmbeddedRetriever(dest)
    naive = NaiveRetriever(naive_path)
    ranked, naive_ms = time_interleaved(
        lambda q: retriever.search(q, top_k=TOP_K, title_boost=TITLE_BOOST),
        lambda q: naive.search(q, top_k=TOP_K, title_boost=TITLE_BOOST),
        questions,
    )
    # The same index ranked by FTS5's bm25() alone (as one built before the postings),
    # interleaved with the postings' first stage: the time saved and the hits unchanged.
    fts5 = EmbeddedRetriever(dest, postings=False)
    with_postings, fts5_ms = time_interleaved(
        lambda q: retriever._search(q, top_k=TOP_K, title_boost=TITLE_BOOST, doc_ids=None),
        lambda q: fts5._search(q, top_k=TOP_K, title_boost=TITLE_BOOST, doc_ids=None),
        questions,
    )
    differ = sum(
        retriever._search(q, top_k=TOP_K, title_boost=TITLE_BOOST, doc_ids=None)
        != fts5._search(q, top_k=TOP_K, title_boost=TITLE_BOOST, doc_ids=None)
        for q in questions
    )
    fts5.close()
    q50, f50 = percentiles(with_postings)[0], percentiles(fts5_ms)[0]
    print(
        f"first stage from postings vs FTS5 bm25() ({retriever.first_stage_kind()}; whole "
        f"search, uncached, interleaved): p50 {q50:.2f} ms vs {f50:.2f} ms (x{q50 / f50:.2f}); "
        f"{differ} of {len(questions)} questions with other evidence"
    )
    top1 = [_top_doc(retriever.search(q, top_k=1, title_boost=TITLE_BOOST)) for q in questions]
    stage1 = first_stage_embedded(dest, questions)
    figures = quality([retriever, naive])
    held = parse_questions(HELDOUT.name, HELDOUT.read_text(encoding="utf-8"))
    worded = print_strata(HELDOUT.name, held, corpus, {"qfarm": retriever, "naive": naive})
    heldout = [json.loads(line)["question"] for line in HELDOUT.read_text().splitlines() if line]
    h_ours, h_naive = time_interleaved(  # uncached: quality() has just searched these
        lambda q: retriever._search(q, top_k=TOP_K, title_boost=TITLE_BOOST, doc_ids=None),
        lambda q: naive.search(q, top_k=TOP_K, title_boost=TITLE_BOOST),
        heldout,
    )
    retriever.close()
    naive.close()
    conn = sqlite3.connect(dest)

    def raw_match(q: str) -> object:
        expr = fts5_match_expression(q)
        sql = "SELECT rowid FROM passages_fts WHERE passages_fts MATCH ? LIMIT ?"
        return conn.execute(sql, (expr, TOP_K)).fetchall() if expr else []

    raw = time_each(raw_match, questions)
    conn.close()
    p50, p95 = percentiles(ranked)
    n50, n95 = percentiles(naive_ms)
    b50, b95 = percentiles(raw)
    verdict = "met" if p50 <= 10.0 else "MISSED"
    print(
        f"embedded query (BM25F title^{TITLE_BOOST:g}+text, top {TOP_K}, {len(questions)} generated "
        f"questions): p50 {p50:.2f} ms, p95 {p95:.2f} ms (target p50 <= 10 ms: {verdict})"
    )
    print(f"baseline naive single-table FTS5, same questions: p50 {n50:.2f} ms, p95 {n95:.2f} ms")
    bar = "met" if p50 <= 1.5 * n50 else "MISSED"
    print(f"embedded / naive: p50 x{p50 / n50:.2f} (bar <= x1.5: {bar}), p95 x{p95 / n95:.2f}")
    print(f"baseline raw FTS5 MATCH, no ranking, same terms: p50 {b50:.3f} ms, p95 {b95:.3f} ms")
    ours, theirs = figures["embedded"], figures["naive-fts5"]
    h50, hn50 = percentiles(h_ours)[0], percentiles(h_naive)[0]
    print(
        f"held-out, qfarm vs naive: recall@{TOP_K} {ours['recall_at_k']:.3f} vs "
        f"{theirs['recall_at_k']:.3f} over the file (bar >= 0.99: "
        f"{'met' if ours['recall_at_k'] >= 0.99 else 'MISSED'}), {worded['qfarm'] or 0:.3f} vs "
        f"{worded['naive'] or 0:.3f} on its worded part (bar: "
        f"{'met' if (worded['qfarm'] or 0) >= 0.99 else 'MISSED'}); p50 interleaved {h50:.2f} ms vs "
        f"{hn50:.2f} ms (x{h50 / hn50:.2f}; bar <= x1.5: {'met' if h50 <= 1.5 * hn50 else 'MISSED'})"
    )
    return p50, top1, stage1


def first_stage_embedded(index: Path, questions: list[str]) -> list[list[str]]:
    """Chunk ids of the embedded BM25F first stage (the re-ranking window), best first."""
    from qfarm.common.retrieval.query import fts5_match_expression
    from qfarm.common.retrieval.ranking import RERANK_DEPTH

    conn = sqlite3.connect(index)
    sql = (
        "SELECT p.chunk_id FROM passages_fts JOIN passages AS p ON p.rowid = passages_fts.rowid"
        " WHERE passages_fts MATCH ? ORDER BY bm25(passages_fts, ?, 1.0), passages_fts.rowid LIMIT ?"
    )
    out: list[list[str]] = []
    for q in questions:
        expr = fts5_match_expression(q)
        rows = conn.execute(sql, (expr, TITLE_BOOST, RERANK_DEPTH)).fetchall() if expr else []
        out.append([r[0] for r in rows])
    conn.close()
    return out


def first_stage_cluster(
    url: str, index: str, questions: list[str], query_type: str
) -> list[list[str]]:
    """Chunk ids of a cluster's first stage (qfarm's body of ``query_type``, the re-ranking
    window), best first."""
    import urllib.request

    from qfarm.common.retrieval.query import search_body
    from qfarm.common.retrieval.ranking import RERANK_DEPTH

    out: list[list[str]] = []
    for q in questions:
        body = search_body(q, top_k=RERANK_DEPTH, title_boost=TITLE_BOOST, query_type=query_type)
        if body is None:
            out.append([])
            continue
        req = urllib.request.Request(
            f"{url}/{index}/_search", data=json.dumps(body).encode(), method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            hits = json.loads(resp.read())["hits"]["hits"]
        out.append([h["_source"]["chunk_id"] for h in hits])
    return out


PARITY_CATEGORIES = (
    "same",
    "windows differ, a top document outside the other's window",
    "windows differ, both top documents in both",
    "same window, first-stage scores differ",
)


def parity_breakdown(
    embedded: list[str | None], cluster: list[str | None],
    embedded_stage1: list[list[str]], cluster_stage1: list[list[str]],
) -> dict[str, int]:
    """Why each question's top document differs between embedded and the cluster.

    Both backends run the same second stage (``rerank_order``) over their first
    stage's top ``RERANK_DEPTH`` (the window), so a difference starts in the first
    stage: the windows hold other passages, and one backend's top document is not
    in the other's window at all (a passage the other never scored high enough to
    re-rank), or both windows hold both top documents in another order; or the
    windows hold the same passages but with other first-stage scores, which stage 2
    multiplies. A top document is in a window when one of its passages is
    (chunk ids are ``<doc_id>#<n>``).
    """
    out = dict.fromkeys(PARITY_CATEGORIES, 0)
    for e, c, s_e, s_c in zip(embedded, cluster, embedded_stage1, cluster_stage1, strict=True):
        if e == c:
            key = PARITY_CATEGORIES[0]
        elif set(s_e) == set(s_c):
            key = PARITY_CATEGORIES[3]
        else:
            docs_e = {chunk.split("#")[0] for chunk in s_e}
            docs_c = {chunk.split("#")[0] for chunk in s_c}
            inside = {e, c} <= docs_e and {e, c} <= docs_c
            key = PARITY_CATEGORIES[2] if inside else PARITY_CATEGORIES[1]
        out[key] += 1
    return out


def _top_doc(evidence: list) -> str | None:
    return evidence[0].doc_id if evidence else None


def bench_opensearch(
    index: Path, questions: list[str], embedded_top1: list[str | None],
    embedded_stage1: list[list[str]],
) -> float | None:
    """The OpenSearch backend on a real node started here (``qfarm.ops.search.launch``):
    indexing rate, query p50/p95 interleaved with the embedded index (both uncached),
    ``_msearch``, the node's CPU per search, top-1 parity and its breakdown, held-out
    quality. Skipped, with one line, where Java 17+ or Maven is missing. Returns the
    OpenSearch p50 (ms)."""
    from bench.perf.saturation import pid_cpu_s, process_cpu_s
    from qfarm.common.errors import ConfigError
    from qfarm.common.settings import Settings
    from qfarm.ops.search.launch import build_search_node, start_search_node
    from qfarm.worker.retrieval import open_retriever
    from qfarm.worker.retrieval.embedded import EmbeddedRetriever
    from qfarm.worker.retrieval.ingest import CorpusSource, build_cluster_index

    try:
        build = build_search_node()
    except ConfigError as exc:
        print(f"opensearch: skipped, no search node ({exc})")
        return None
    with start_search_node(build=build) as node:
        label = f"opensearch on a real node (OpenSearch {node.version}, heap {node.heap}, same machine)"
        retriever = open_retriever(Settings(retriever="opensearch", es_url=node.url))
        embedded = EmbeddedRetriever(index)
        try:
            report = build_cluster_index(retriever, CorpusSource.resolve("default"), progress=False)
            print(
                f"{label} build: {report.elapsed_s:.2f} s, {report.passages:,} passages "
                f"({report.passages_per_s:,.0f} passages/s: bulk, refresh, alias)"
            )
            heldout = [json.loads(line)["question"] for line in HELDOUT.read_text().splitlines() if line]
            # Warm the node before anything is timed: the JVM compiles its hot paths during
            # the first few hundred searches. It keeps no hits between searches (a search
            # with hits is not request-cached), so the warm-up answers nothing in advance.
            for q in heldout:
                retriever.search(q, top_k=TOP_K, title_boost=TITLE_BOOST)
            node_cpu0, cpu0 = pid_cpu_s([node.pid]), process_cpu_s()
            ours, theirs_ms = time_interleaved(
                lambda q: embedded._search(q, top_k=TOP_K, title_boost=TITLE_BOOST, doc_ids=None),
                lambda q: retriever.search(q, top_k=TOP_K, title_boost=TITLE_BOOST),
                questions, warm_up=0,
            )  # fmt: skip
            node_cpu = (pid_cpu_s([node.pid]) - node_cpu0) * 1000.0 / len(questions)
            both_cpu = (process_cpu_s() - cpu0) * 1000.0 / len(questions)
            p50, p95 = percentiles(theirs_ms)
            e50, e95 = percentiles(ours)
            print(
                f"{label} query over HTTP ({retriever.query_type}, window 25 re-ranked here), "
                f"{len(questions)} generated questions: p50 {p50:.2f} ms, p95 {p95:.2f} ms; "
                f"embedded interleaved p50 {e50:.2f} ms, p95 {e95:.2f} ms (opensearch x{p50 / e50:.1f})"
            )
            print(
                f"CPU per search: the node's JVM {node_cpu:.2f} ms; this process {both_cpu:.2f} ms "
                "(both backends' searches and the client)"
            )
            h_ours, h_theirs = time_interleaved(
                lambda q: embedded._search(q, top_k=TOP_K, title_boost=TITLE_BOOST, doc_ids=None),
                lambda q: retriever.search(q, top_k=TOP_K, title_boost=TITLE_BOOST),
                heldout, warm_up=0,
            )  # fmt: skip
            h50, h95 = percentiles(h_theirs)
            he50 = percentiles(h_ours)[0]
            print(
                f"{label} query, {len(heldout)} held-out questions: p50 {h50:.2f} ms, p95 {h95:.2f} ms; "
                f"embedded interleaved p50 {he50:.2f} ms (opensearch x{h50 / he50:.1f})"
            )
            batch = 16
            per_q = []
            for _ in range(3):  # three passes, the median: one pass is at the mercy of the load
                t0 = time.perf_counter()
                for i in range(0, len(questions), batch):
                    retriever.search_many(
                        questions[i : i + batch], top_k=TOP_K, title_boost=TITLE_BOOST
                    )
                per_q.append((time.perf_counter() - t0) * 1000.0 / len(questions))
            m = statistics.median(per_q)
            print(
                f"{label} _msearch x{batch}: {m:.2f} ms per question (median of 3 passes "
                f"{', '.join(f'{x:.2f}' for x in per_q)}; x{m / p50:.2f} single-search p50)"
            )
            theirs = [
                _top_doc(retriever.search(q, top_k=1, title_boost=TITLE_BOOST)) for q in questions
            ]
            same = sum(a == b for a, b in zip(embedded_top1, theirs, strict=True))
            print(
                f"ranking parity ({retriever.query_type}): same top document as embedded for "
                f"{same}/{len(questions)} questions ({same / len(questions):.1%}; bar >= 95%)"
            )
            stage1 = first_stage_cluster(node.url, Settings().es_index, questions,
                                         retriever.query_type)  # fmt: skip
            reasons = parity_breakdown(embedded_top1, theirs, embedded_stage1, stage1)
            print("parity breakdown: " + "; ".join(f"{k}: {v}" for k, v in reasons.items()))
            quality([retriever])
        finally:
            retriever.close()
            embedded.close()
    return p50


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=int, default=1000)
    ap.add_argument("--no-opensearch", action="store_true")
    ap.add_argument("--quick", action="store_true",
                    help="seconds, figures meaningless: 30 questions, no OpenSearch (CI)")
    args = ap.parse_args()
    if args.quick:
        args.questions, args.no_opensearch = 30, True

    from qfarm.worker.retrieval.default_corpus import default_corpus_path

    corpus = json.loads(default_corpus_path().read_text(encoding="utf-8"))
    questions = make_questions(corpus, args.questions)
    print(
        f"retrieval benchmark: default corpus ({len(corpus):,} articles), {len(questions):,} questions, {os.cpu_count()} CPUs"
    )
    with tempfile.TemporaryDirectory(prefix="qfarm-retrieval-") as tmp:
        p50, top1, stage1 = bench_embedded(Path(tmp), questions, corpus)
        if not args.no_opensearch:
            bench_opensearch(Path(tmp) / "default.sqlite", questions, top1, stage1)
    print(f"query_p50_ms={p50:.3f}")


if __name__ == "__main__":
    main()
