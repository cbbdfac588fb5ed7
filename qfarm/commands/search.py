"""`qfarm search "QUESTION"`: print the evidence map E1..Ek a job would get.

Works on every backend (``--backend`` or ``QFARM_RETRIEVER``). On the embedded
backend with the default index path, the default-corpus index is built first
if it is missing or stale.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
import time
from typing import Any

from qfarm import runtime
from qfarm.common.questions import check_question
from qfarm.common.settings import load_settings
from qfarm.producer.api import open_local_retriever


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "search",
        help="retrieve evidence for a question and print the evidence map",
        description="BM25 over title (boosted) and text; prints E1..Ek in rank order.",
    )
    p.add_argument("question", help="the question, quoted")
    runtime.add_retrieval_flags(p)
    p.add_argument("--json", action="store_true", help="print the evidence map as JSON")
    p.set_defaults(func=run)


def _print_map(question: str, result: dict[str, Any]) -> None:
    print(
        f"{result['backend']} · index {result['index_version']} · "
        f"{len(result['evidence'])} passages · {result['retrieval_ms']:.1f} ms"
    )
    print(f"Q: {question}")
    for ev in result["evidence"]:
        print(
            f"\n[{ev['id']}] {ev['title']}  (score {ev['score']:.3f}; {ev['chunk_id']}, "
            f"chars {ev['offset_start']}-{ev['offset_end']})"
        )
        print(textwrap.indent(textwrap.fill(ev["text"], width=96), "    "))
    if not result["evidence"]:
        print("\n(no passage matched)")


def run(args: argparse.Namespace) -> int:
    runtime.check_retrieval_flags(args)
    settings = load_settings(**({"retriever": args.backend} if args.backend else {}))
    args.question = check_question(args.question, "", settings.max_question_chars)
    retriever = open_local_retriever(settings, progress=sys.stderr.isatty())
    try:
        t0 = time.perf_counter()
        evidence = retriever.search(args.question, top_k=args.top_k, title_boost=args.title_boost)
        elapsed_ms = (time.perf_counter() - t0) * 1000.0
        result = {
            "question": args.question,
            "backend": retriever.backend,
            "index_version": retriever.index_version(),
            "retrieval_ms": round(elapsed_ms, 3),
            "evidence": [e.model_dump(mode="json") for e in evidence],
        }
    finally:
        retriever.close()
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
    else:
        _print_map(args.question, result)
    return 0
