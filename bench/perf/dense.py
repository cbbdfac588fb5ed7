"""The dense stage's worth and cost: recall@8 and latency of the naive, lexical and fused rankings.

Three embedded indexes of the default corpus, the same passages: the naive
single-table FTS5 index (``bench.perf.retrieval``), qfarm's lexical ranking
(``bm25f-v5``) and the same with the dense stage (``qfarm index --dense``:
all-MiniLM-L6-v2 vectors, the lexical and dense top 30 fused by reciprocal
rank). For each question file with answers: recall@8, article hit@8 and MRR
of the three (``qfarm eval-retrieval``'s figures), then the p50 of the three
searches interleaved on the same questions, and the ratios against the naive
p50 (the latency bar is lexical <= 1.5x naive; the dense stage is
opt-in because it is far above it). The indexes are built once under
``$QFARM_DATA_DIR/bench-dense/`` (encoding the corpus takes minutes on two
cores; the build's passages/s is printed when it runs).

Needs the model: ``make install-dense``.

    python -m bench.perf.dense [--files general,independent_heldout]

Last line: ``dense_recall_heldout=<recall@8 of the fused ranking on independent_heldout.jsonl>``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from bench.perf.retrieval import NaiveRetriever, build_naive_index, time_interleaved

TOP_K = 8
TITLE_BOOST = 2.0
QUESTIONS = Path(__file__).resolve().parents[1] / "questions"
FILES = ("general", "answerability", "independent_tune", "independent_heldout", "independent_named")


def build(where: Path) -> tuple[Path, Path, Path]:
    """(naive, lexical, dense) index files, built if missing or stale."""
    from qfarm.worker.retrieval.dense import open_encoder
    from qfarm.worker.retrieval.ingest import CorpusSource, build_embedded_index

    source = CorpusSource.resolve("default")
    lexical, dense, naive = where / "lexical.sqlite", where / "dense.sqlite", where / "naive.sqlite"
    report = build_embedded_index(source, lexical, progress=False)
    if report.built:
        naive.unlink(missing_ok=True)
    if not naive.exists():
        build_naive_index(lexical, naive)
    t0 = time.perf_counter()
    report = build_embedded_index(source, dense, progress=True, encoder=open_encoder())
    if report.built:
        elapsed = time.perf_counter() - t0
        print(f"dense index built: {report.passages:,} passages in {elapsed:.0f} s "
              f"({report.passages / elapsed:.1f} passages/s, encoding included)")  # fmt: skip
    return naive, lexical, dense


def searcher(retriever: Any) -> Any:
    return lambda text: retriever.search(text, top_k=TOP_K, title_boost=TITLE_BOOST)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", default=",".join(FILES))
    args = ap.parse_args()

    from qfarm.common.questions import parse_questions
    from qfarm.common.retrieval.evaluation import titles_by_id
    from qfarm.common.settings import Settings
    from qfarm.worker.retrieval.embedded import EmbeddedRetriever
    from qfarm.worker.retrieval.evaluate import evaluate

    naive_path, lexical_path, dense_path = build(Settings().data_dir / "bench-dense")
    retrievers: dict[str, Any] = {
        "naive": NaiveRetriever(naive_path),
        "lexical": EmbeddedRetriever(lexical_path),
        "dense": EmbeddedRetriever(dense_path),
    }
    print(f"indexes: lexical {retrievers['lexical'].index_version()}, "
          f"dense {retrievers['dense'].index_version()} ({retrievers['dense'].describe()['dense_model']})")  # fmt: skip
    heldout = None
    for name in args.files.split(","):
        path = QUESTIONS / f"{name}.jsonl"
        questions = parse_questions(path.name, path.read_text(encoding="utf-8"))
        titles = titles_by_id(questions)
        figures = {label: evaluate(r, questions, titles, top_k=TOP_K, title_boost=TITLE_BOOST)
                   for label, r in retrievers.items()}  # fmt: skip
        print(f"{path.name} ({figures['naive']['with_answers']} with answers):")
        for label, fig in figures.items():
            hit = fig["article_hit_at_k"]
            print(f"  {label:<8} recall@{TOP_K} {fig['recall_at_k']:.3f}  MRR {fig['mrr']:.3f}"
                  + (f"  article hit@{TOP_K} {hit:.3f}" if hit is not None else ""))  # fmt: skip
        texts = [q.text for q in questions]
        naive_ms, lexical_ms = time_interleaved(searcher(retrievers["naive"]), searcher(retrievers["lexical"]), texts)
        # A new retriever: the one above has every question's vector cached by now, and a
        # question a sweep has not seen before pays the encoding. Warmed on other questions.
        fresh = EmbeddedRetriever(dense_path)
        for i in range(5):
            fresh.search(f"warm-up question number {i}", top_k=TOP_K, title_boost=TITLE_BOOST)
        naive2_ms, dense_ms = time_interleaved(searcher(retrievers["naive"]), searcher(fresh), texts,
                                               warm_up=0)  # fmt: skip
        fresh.close()
        p50 = {k: statistics.median(v) for k, v in
               (("naive", naive_ms), ("lexical", lexical_ms), ("naive2", naive2_ms), ("dense", dense_ms))}  # fmt: skip
        print(f"  p50 interleaved: naive {p50['naive']:.2f} ms, lexical {p50['lexical']:.2f} ms "
              f"(x{p50['lexical'] / p50['naive']:.2f}); naive {p50['naive2']:.2f} ms, dense, each "
              f"question new, {p50['dense']:.2f} ms (x{p50['dense'] / p50['naive2']:.2f})")  # fmt: skip
        if name == "independent_heldout":
            heldout = figures["dense"]["recall_at_k"]
    for r in retrievers.values():
        r.close()
    if heldout is not None:
        print(f"dense_recall_heldout={heldout:.3f}")


if __name__ == "__main__":
    main()
