"""`qfarm eval-retrieval FILE`: recall@k, article hit@k, MRR and latency of retrieval.

    qfarm eval-retrieval bench/questions/independent_heldout.jsonl --top-k 8
    qfarm eval-retrieval general.jsonl --backend embedded --backend opensearch

FILE is a question file with gold ``answers`` (JSONL; an optional ``title``
names the article). Prints one line of figures per backend (rates with their 95%
intervals, latency of cold searches) and, with ``--out``, writes them with the first
misses to a JSON report; without it nothing is written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from qfarm import question_sets, runtime
from qfarm.common.errors import InputError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval-retrieval",
        help="measure retrieval recall@k, article hit@k, MRR and latency on a question file",
        description="Search every question of FILE and judge the evidence against its gold answers.",
    )
    p.add_argument("file", type=Path, help="JSONL question file with `answers` (and optional `title`), or a shipped set's name")
    runtime.add_retrieval_flags(p, many_backends=True)
    runtime.add_selection_flags(p)
    p.add_argument(
        "--out",
        type=Path,
        metavar="PATH",
        help="also write the figures and the first misses to this JSON report (default: "
             "none written)",
    )
    p.set_defaults(func=run)


def _line(fig: dict[str, Any]) -> str:
    def pct(value: float | None, ci: list[float] | None) -> str:
        if value is None:
            return "n/a"
        return f"{value:.1%}" + (f" [{ci[0]:.1%}–{ci[1]:.1%}]" if ci else "")

    mrr = "n/a" if fig["mrr"] is None else f"{fig['mrr']:.3f}"
    return (
        f"{fig['backend']:<13} recall@{fig['top_k']} "
        f"{pct(fig['recall_at_k'], fig['recall_at_k_ci95'])} "
        f"({fig['with_answers']} with answers) · article hit@{fig['top_k']} "
        f"{pct(fig['article_hit_at_k'], fig['article_hit_at_k_ci95'])} "
        f"({fig['with_titles']} with titles) · MRR {mrr} · "
        f"p50 {fig['latency_p50_ms']:.2f} ms · p95 {fig['latency_p95_ms']:.2f} ms "
        f"({fig['timed_searches']} cold searches) · index {fig['index_version']}"
    )


def run(args: argparse.Namespace) -> int:
    from qfarm.common.questions import parse_questions, select_questions
    from qfarm.common.retrieval.evaluation import titles_by_id
    from qfarm.common.settings import load_settings
    from qfarm.producer.api import open_local_retriever
    from qfarm.worker.retrieval.evaluate import evaluate

    runtime.check_retrieval_flags(args)
    args.file = question_sets.resolve(args.file)
    try:
        content = args.file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{args.file}: cannot read the question file ({exc})") from exc
    questions, selection = select_questions(parse_questions(str(args.file), content),
                                            limit=args.limit, sample=args.sample, seed=args.seed)
    if not any(q.answers for q in questions):
        raise InputError(
            f"{args.file}: no question carries `answers`; eval-retrieval needs a JSONL file with "
            '{"question": ..., "answers": [...]} lines'
        )
    titles = titles_by_id(questions)
    results = []
    for backend in args.backend or [None]:
        settings = load_settings(**({"retriever": backend} if backend else {}))
        retriever = open_local_retriever(settings, progress=sys.stderr.isatty())
        try:
            fig = evaluate(
                retriever, questions, titles, top_k=args.top_k, title_boost=args.title_boost
            )
        finally:
            retriever.close()
        print(_line(fig))
        results.append(fig)
    if selection is not None:
        print(f"questions: {len(questions)} of the file's {selection.of} (limited)")
    report = {"file": str(args.file), "title_boost": args.title_boost,
              "n_questions": len(questions),
              "selection": selection.model_dump(mode="json") if selection else None,
              "backends": results}
    print("intervals: 95% Wilson, over the questions")
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n",
                            encoding="utf-8")
        print(f"report: {args.out}")
    return 0
