"""`qfarm sim`: run the vLLM-compatible simulator in the foreground (docs/architecture.md, 'The simulator').

Point the farm at it with ``QFARM_LLM_ENDPOINTS=http://127.0.0.1:PORT``. Every
answer it gives is simulated from the prompt's evidence; results produced with
it say so.
"""

from __future__ import annotations

import argparse

from qfarm.common.errors import InputError


def register(sub: argparse._SubParsersAction) -> None:
    from qfarm.ops.sim.config import add_sim_arguments  # keep `qfarm --help` light

    p = sub.add_parser(
        "sim",
        help="run the vLLM-compatible simulator (simulated answers, no GPU)",
        description=(
            "Serve /v1/models, /v1/completions, /v1/chat/completions, /health and /metrics "
            "like a vLLM server, answering from the evidence in each prompt. Answers are "
            "SIMULATED. Runtime fault control: POST /sim/faults."
        ),
    )
    add_sim_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from qfarm.ops.sim.config import config_from_args
    from qfarm.ops.sim.server import run as serve

    try:
        config = config_from_args(args)
    except ValueError as exc:
        raise InputError(f"qfarm sim: {exc}") from None
    if not 0 <= config.port <= 65535:
        raise InputError(f"qfarm sim: --port {config.port}: a TCP port is 0-65535 (0 picks a free one)")
    try:
        serve(config)
    except OSError as exc:
        raise InputError(
            f"qfarm sim: cannot listen on {config.host}:{config.port} ({exc.strerror or exc}); "
            "pick another --port, or --port 0 for a free one"
        ) from None
    return 0
