"""`qfarm view [RESULTS_DIR]`: browse runs, rows and comparisons in a web browser.

Redis is optional: runs that exist only there are listed when QFARM_REDIS_URL answers
within half a second, and a one-line note says so when it does not.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from qfarm import runtime
from qfarm.common.errors import InputError
from qfarm.common.settings import load_settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "view",
        help="serve a web viewer over a results directory",
        description="Serve read-only pages of the runs in RESULTS_DIR: runs, run summaries, "
        "rows with filters, single rows claim by claim, and A/B comparisons. Needs no Redis; "
        "when QFARM_REDIS_URL answers, runs that exist only in Redis (in progress, or "
        "followed on another host) are listed too.",
    )
    p.add_argument(
        "results_dir",
        metavar="RESULTS_DIR",
        nargs="?",
        type=Path,
        default=None,
        help="directory of run directories (default: QFARM_RESULTS_DIR, ./qfarm-runs)",
    )
    p.add_argument("--port", type=runtime.port_arg, default=8765, help="port to listen on (default 8765)")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1: this machine only, no login; any other "
        "address needs QFARM_API_TOKENS, and the pages then ask for a token)",
    )
    p.add_argument(
        "--no-redis",
        action="store_true",
        help="do not look for runs in Redis (QFARM_REDIS_URL); show the results directory only",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from qfarm.producer.http.auth import Tokens
    from qfarm.producer.viewer.server import make_server  # the viewer is imported only to serve

    settings = load_settings()
    results_dir = args.results_dir or settings.results_dir
    if not results_dir.is_dir():
        raise InputError(f"{results_dir}: no such results directory; give one, e.g. "
                         "`qfarm view qfarm-runs`")
    try:
        server = make_server(
            results_dir, args.host, args.port,
            redis_url=None if args.no_redis else settings.redis_url,
            index_path=settings.embedded_index_path(),
            tokens=Tokens.from_settings(settings),
        )
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
