"""Retrieval quality side by side: the embedded index and the OpenSearch backend on a real node.

Starts one OpenSearch node (``qfarm.ops.search.launch``; Java 17+ and Maven),
fills it from the default corpus as ``qfarm index --backend opensearch`` does
and builds the embedded index of the same corpus (the same chunker, so the
same passages), then searches every shipped question set with gold answers
through both backends, as ``qfarm eval-retrieval FILE --backend embedded
--backend opensearch`` does, at ``top_k`` 8 (the default policy) and 3 (the
CPU policy). Prints one Markdown table: recall@k of each backend, and at 8
how many questions only one of them answers. With ``--show N`` it lists up to
N such questions per set, with each backend's first evidence title, to be read.
Both rankings are the same two stages (``bm25f-v5``); what differs is the
first stage's scoring (docs/retrieval.md, 'Quality side by side').

    python -m bench.perf.search_quality [--show 5] [--sets general,independent_heldout]
                                        [--url http://127.0.0.1:9200] [--quick]

``--url`` uses a node already running (its index is rebuilt). The last line is
``heldout_recall8=<embedded>/<opensearch>``. Quality only: latency is
``bench.perf.retrieval``'s.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

QUESTIONS = Path(__file__).resolve().parents[1] / "questions"
# Every shipped set with gold answers (real_model.jsonl's are general.jsonl's first 50).
SETS = ("general", "answerability", "bounded_universal", "independent_tune",
        "independent_heldout", "independent_named")  # fmt: skip
KS = (8, 3)
TITLE_BOOST = 2.0


@contextlib.contextmanager
def node_url(url: str | None) -> Iterator[str | None]:
    """``url``, or a node started for the run (``None`` when Java or Maven is missing)."""
    if url:
        yield url
        return
    from qfarm.common.errors import ConfigError
    from qfarm.ops.search.launch import start_search_node

    try:
        node = start_search_node()
    except ConfigError as exc:
        print(f"opensearch: skipped, no search node ({exc})")
        yield None
        return
    with node:
        print(f"search node: {node.description} at {node.url}", flush=True)
        yield node.url


def answer_ranks(retriever: Any, questions: Sequence[Any], top_k: int) -> list[tuple[int | None, str]]:
    """Per question: the rank of the first passage holding a gold answer (None: none does),
    and the first passage's title."""
    from qfarm.common.retrieval.evaluation import judge

    out = []
    for q in questions:
        evidence = retriever.search(q.text, top_k=top_k, title_boost=TITLE_BOOST)
        out.append((judge(q, None, evidence).answer_rank, evidence[0].title if evidence else "-"))
    return out


def only_one(
    a: Sequence[tuple[int | None, str]], b: Sequence[tuple[int | None, str]]
) -> tuple[list[int], list[int]]:
    """Indices of the questions only ``a`` answers, and of those only ``b`` answers."""
    pairs = list(enumerate(zip(a, b, strict=True)))
    return ([i for i, (x, y) in pairs if x[0] is not None and y[0] is None],
            [i for i, (x, y) in pairs if x[0] is None and y[0] is not None])  # fmt: skip


def rate(ranks: Sequence[tuple[int | None, str]]) -> float:
    return sum(r is not None for r, _ in ranks) / len(ranks)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default=",".join(SETS), help="question sets (comma list of names)")
    ap.add_argument("--show", type=int, default=0, metavar="N",
                    help="list up to N questions per set that only one backend answers at 8")
    ap.add_argument("--url", help="an OpenSearch node already running (default: start one)")
    ap.add_argument("--quick", action="store_true",
                    help="seconds, figures meaningless: the first 20 questions of general.jsonl (CI)")
    args = ap.parse_args(argv)
    limit = None
    if args.quick:
        args.sets, limit = "general", 20

    from qfarm.common.questions import parse_questions
    from qfarm.common.settings import Settings
    from qfarm.worker.retrieval import open_retriever
    from qfarm.worker.retrieval.embedded import EmbeddedRetriever
    from qfarm.worker.retrieval.ingest import (
        CorpusSource,
        build_cluster_index,
        build_embedded_index,
    )

    sets = {}
    for name in args.sets.split(","):
        qs = parse_questions(f"{name}.jsonl", (QUESTIONS / f"{name}.jsonl").read_text("utf-8"))
        sets[name] = [q for q in qs if q.answers][:limit]
    with tempfile.TemporaryDirectory(prefix="qfarm-quality-") as tmp, node_url(args.url) as url:
        if url is None:
            return
        dest = Path(tmp) / "default.sqlite"
        build_embedded_index(CorpusSource.resolve("default"), dest, progress=False, force=True)
        embedded = EmbeddedRetriever(dest)
        cluster = open_retriever(Settings(retriever="opensearch", es_url=url))
        try:
            report = build_cluster_index(cluster, CorpusSource.resolve("default"), progress=False,
                                         force=True)  # fmt: skip
            print(f"opensearch index: {report.passages:,} passages; embedded: "
                  f"{embedded.describe()}", flush=True)  # fmt: skip
            rows = []
            for name, questions in sets.items():
                figs = {k: (answer_ranks(embedded, questions, k), answer_ranks(cluster, questions, k))
                        for k in KS}  # fmt: skip
                e8, o8 = figs[8]
                only_e, only_o = only_one(e8, o8)
                rows.append((name, len(questions), figs))
                print(f"{name}: done (query type {cluster.query_type})", flush=True)
                for label, idx in (("embedded only", only_e), ("opensearch only", only_o)):
                    for i in idx[: args.show]:
                        q = questions[i]
                        print(f"  {label}: {q.text!r} gold {q.answers[0]!r} | embedded top-1 "
                              f"{e8[i][1]!r} (answer rank {e8[i][0]}) | opensearch top-1 "
                              f"{o8[i][1]!r} (answer rank {o8[i][0]})")  # fmt: skip
        finally:
            cluster.close()
            embedded.close()
    print()
    print("| set (questions with answers) | recall@8 embedded · OpenSearch | answered by one only "
          "(embedded / OpenSearch) | recall@3 embedded · OpenSearch | answered by one only |")
    print("|---|---|---|---|---|")
    for name, n, figs in rows:
        cells = []
        for k in KS:
            e, o = figs[k]
            only_e, only_o = only_one(e, o)
            cells.append(f"{rate(e):.3f} · {rate(o):.3f} | {len(only_e)} / {len(only_o)}")
        print(f"| `{name}.jsonl` ({n:,}) | " + " | ".join(cells) + " |")
    held = next((figs for name, _, figs in rows if name == "independent_heldout"), None)
    if held:
        print(f"heldout_recall8={rate(held[8][0]):.3f}/{rate(held[8][1]):.3f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
