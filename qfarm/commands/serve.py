"""`qfarm serve`: the HTTP front door (docs/api.md) on uvicorn.

Parses flags, refuses an unsafe bind, and runs ``qfarm.producer.http.app.create_app``.
"""

from __future__ import annotations

import argparse

from qfarm import runtime
from qfarm.common.errors import InputError
from qfarm.common.settings import load_settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="serve the HTTP API (ask, sweeps, runs, /metrics) and the viewer",
        description="The farm's HTTP front door: POST /v1/ask, POST /v1/sweeps, /v1/runs..., "
        "/metrics for Prometheus, /healthz, and the viewer's pages at /. See docs/api.md.",
    )
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1; any other needs QFARM_API_TOKENS)")
    p.add_argument("--port", type=runtime.port_arg, default=8080, help="port to listen on (default 8080)")
    p.add_argument("--eager", action="store_true",
                   help="answer in this process (no Redis, no workers): demos and tests")
    p.add_argument("--log-level", default="warning",
                   choices=("critical", "error", "warning", "info", "debug"))
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import logging
    import socket

    import uvicorn

    from qfarm.producer.http.app import create_app
    from qfarm.producer.http.auth import Tokens, check_bind

    settings = load_settings()
    check_bind(args.host, Tokens.from_settings(settings))
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    app = create_app(settings, eager=args.eager)
    try:  # fail with one line, not a traceback, when the port is taken
        with socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((args.host, args.port))
    except OSError as exc:
        raise InputError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}; "
                         "pick another --port") from None
    print(f"qfarm API at http://{args.host}:{args.port}/  (docs: /docs; Ctrl-C stops)", flush=True)
    # No access log: a viewer login's address carries ?token=, and a log must never hold one.
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False)
    return 0
