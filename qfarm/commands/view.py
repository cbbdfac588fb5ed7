"""`qfarm view [RESULTS_DIR]`: browse runs, rows and comparisons in a web browser (no Redis)."""

from __future__ import annotations

import argparse
from pathlib import Path

from common.errors import InputError
from common.settings import load_settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "view",
        help="serve a web viewer over a results directory",
        description="Serve read-only pages of the runs in RESULTS_DIR: runs, run summaries, "
        "rows with filters, single rows and A/B comparisons. Needs no Redis.",
    )
    p.add_argument(
        "results_dir",
        metavar="RESULTS_DIR",
        nargs="?",
        type=Path,
        default=None,
        help="directory of run directories (default: QFARM_RESULTS_DIR, bench/results)",
    )
    p.add_argument("--port", type=int, default=8765, help="port to listen on (default 8765)")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1: this machine only; the pages have no login)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from producer.viewer.server import make_server  # the viewer is imported only to serve

    results_dir = args.results_dir or load_settings().results_dir
    if not results_dir.is_dir():
        raise InputError(f"{results_dir}: no such results directory; give one, e.g. "
                         "`qfarm view bench/results`")
    try:
        server = make_server(results_dir, args.host, args.port)
    except OSError as exc:
        raise InputError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}; "
                         "pick another --port") from None
    print(f"viewing {results_dir} at http://{args.host}:{server.server_port}/  (Ctrl-C stops)",
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
