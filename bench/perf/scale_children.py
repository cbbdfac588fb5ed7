"""The processes ``bench.perf.scale`` measures one at a time, so each peak RSS is its own.

Each child prints one JSON line last: its figures, ``rss_mb`` its peak resident memory
(``ru_maxrss``), ``seconds`` the wall of what it was started for.
"""

from __future__ import annotations

import json
import math
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.perf.farmkit import REPO, farm_env

GENERAL = REPO / "bench" / "questions" / "general.jsonl"
HELDOUT = REPO / "bench" / "questions" / "independent_heldout.jsonl"
N_MODES = 3


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def spawn(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``python -m bench.perf.scale --child ARGS`` and return its last line's JSON."""
    out = subprocess.run([sys.executable, "-m", "bench.perf.scale", "--child", *args],
                         capture_output=True, text=True, cwd=REPO, env=env or farm_env())
    if out.returncode != 0:
        raise RuntimeError(f"child {args[0]} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def samples_for(jobs: int, questions: Path = GENERAL) -> int:
    """n such that the question set × 3 modes × n holds at least ``jobs`` jobs."""
    from qfarm.common.questions import parse_questions

    count = len(parse_questions(questions.name, questions.read_text(encoding="utf-8")))
    return max(1, math.ceil(jobs / (count * N_MODES)))


def _settings(results: str, index: str, sim_url: str, redis_url: str | None = None) -> Any:
    from qfarm.common.settings import Settings

    extra = {"redis_url": redis_url} if redis_url else {}
    return Settings(results_dir=Path(results), index_path=Path(index), llm_endpoints=sim_url,
                    **extra)


def _spec(jobs: int, questions: Path) -> Any:
    from qfarm.common.models import ALL_MODES
    from qfarm.producer import SweepSpec

    return SweepSpec(questions=questions, modes=ALL_MODES, n=samples_for(jobs, questions),
                     use_cache=False)


def child_sweep(driver: str, jobs: str, results: str, index: str, sim_url: str,
                redis_url: str = "", questions: str = str(GENERAL)) -> dict[str, Any]:
    """An eager sweep to its end, or a distributed one enqueued and left (detach)."""
    from qfarm.producer import run_sweep

    settings = _settings(results, index, sim_url, redis_url or None)
    t0 = time.perf_counter()
    result = run_sweep(_spec(int(jobs), Path(questions)), eager=driver == "eager", detach=driver != "eager",
                       settings=settings)
    return {"seconds": time.perf_counter() - t0, "rss_mb": peak_rss_mb(),
            "run_id": result.manifest.run_id, "run_dir": str(result.run_dir),
            "jobs": result.manifest.n_jobs, "status": str(result.status),
            "enqueue_s": result.enqueue_s}


def child_follow(run_id: str, results: str, index: str, sim_url: str,
                 redis_url: str) -> dict[str, Any]:
    """Follow a distributed run to its end: the aggregator (rows.jsonl, summary.md)."""
    from qfarm.producer import follow_run

    t0 = time.perf_counter()
    result = follow_run(run_id, settings=_settings(results, index, sim_url, redis_url))
    return {"seconds": time.perf_counter() - t0, "rss_mb": peak_rss_mb(),
            "rows": result.rows_written, "status": str(result.status)}


def child_cli(*argv: str) -> dict[str, Any]:
    """One ``qfarm`` command in this process."""
    from qfarm.cli import main

    t0 = time.perf_counter()
    code = main(list(argv))
    if code:
        raise SystemExit(code)
    return {"seconds": time.perf_counter() - t0, "rss_mb": peak_rss_mb()}


def child_viewer(results: str, run_id: str) -> dict[str, Any]:
    """The viewer's first load of a run page (it indexes rows.jsonl), then a filtered page."""
    from qfarm.producer.viewer.router import Viewer

    viewer = Viewer(Path(results))
    t0 = time.perf_counter()
    first = viewer.handle(f"/runs/{run_id}", {})
    first_s = time.perf_counter() - t0
    query = {"mode": "claim_lattice", "verdict": "UNGROUNDED", "page": "3"}
    t1 = time.perf_counter()
    page = viewer.handle(f"/runs/{run_id}/rows", query)
    filtered_s = time.perf_counter() - t1
    if first.status != 200 or page.status != 200:
        raise SystemExit(f"viewer answered {first.status} / {page.status}")
    return {"first_load_s": first_s, "filtered_s": filtered_s, "rss_mb": peak_rss_mb()}


def child_build(corpus: str, dest: str) -> dict[str, Any]:
    from qfarm.worker.retrieval.ingest import CorpusSource, build_embedded_index

    report = build_embedded_index(CorpusSource.resolve(corpus), Path(dest), progress=False,
                                  force=True)
    return {"seconds": report.elapsed_s, "passages": report.passages,
            "documents": report.documents, "stages_s": report.stages_s, "rss_mb": peak_rss_mb()}


def child_query(index: str, corpus: str, queries: str, heldout: str,
                profile: str = "") -> dict[str, Any]:
    """Query latency on generated questions, recall@8 of the shipped sets."""
    from bench.perf.retrieval import TITLE_BOOST, TOP_K, make_questions, percentiles, time_each
    from bench.perf.scale_passages import originals_search
    from qfarm.common.questions import parse_questions
    from qfarm.common.retrieval.evaluation import judge, titles_by_id
    from qfarm.worker.retrieval.embedded import EmbeddedRetriever
    from qfarm.worker.retrieval.evaluate import evaluate

    retriever = EmbeddedRetriever(Path(index))
    base = json.loads(Path(corpus).read_text(encoding="utf-8"))
    questions = make_questions(base, int(queries))

    def search(q: str) -> object:
        return retriever.search(q, top_k=TOP_K, title_boost=TITLE_BOOST)

    p50, p95 = percentiles(time_each(search, questions))
    out: dict[str, Any] = {"p50_ms": p50, "p95_ms": p95, "rss_mb": 0.0,
                           "first_stage": retriever.first_stage_kind()}
    # The same questions ranked by FTS5's bm25() alone (an index without postings).
    fts5 = EmbeddedRetriever(Path(index), postings=False)
    out["fts5_p50_ms"], out["fts5_p95_ms"] = percentiles(time_each(
        lambda q: fts5._search(q, top_k=TOP_K, title_boost=TITLE_BOOST, doc_ids=None), questions))
    fts5.close()
    originals = {v.get("title") or k for k, v in base.items() if v.get("extract")}
    out["originals_differs"] = 0
    for name, path, limit in (("general", GENERAL, 10**9), ("heldout", HELDOUT, int(heldout))):
        if limit <= 0:
            continue
        qs = parse_questions(path.name, path.read_text(encoding="utf-8"))[:limit]
        fig = evaluate(retriever, qs, titles_by_id(qs), top_k=TOP_K, title_boost=TITLE_BOOST)
        out[f"recall_{name}"] = fig["recall_at_k"]
        # The same questions with the copies left out of the ranking (not of the index's
        # statistics): what the copies' places cost, apart from what a larger index does
        # to the ranking of the same articles.
        found = answered = 0
        for q in qs:
            evidence = originals_search(retriever, q.text, originals, top_k=TOP_K,
                                        title_boost=TITLE_BOOST)
            judged = judge(q, q.title, evidence)
            found += judged.answer_rank is not None and judged.has_answers
            answered += judged.has_answers
            real = retriever.search(q.text, top_k=TOP_K, title_boost=TITLE_BOOST)
            out["originals_differs"] += evidence != real
        out[f"originals_{name}"] = round(found / answered, 4) if answered else None
    if profile:
        import cProfile
        import io
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        for q in questions[:100]:  # not search(): these are in its cache by now
            retriever._search(q, top_k=TOP_K, title_boost=TITLE_BOOST, doc_ids=None)
        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(14)
        print(text.getvalue(), file=sys.stderr)
        out["profile"] = text.getvalue()
    out["rss_mb"] = peak_rss_mb()
    return out


CHILDREN = {
    "sweep": child_sweep,
    "follow": child_follow,
    "cli": child_cli,
    "viewer": child_viewer,
    "build": child_build,
    "query": child_query,
}


def run_child(argv: Sequence[str]) -> int:
    name, *rest = argv
    result = CHILDREN[name](*rest)
    print(json.dumps(result))
    return 0
