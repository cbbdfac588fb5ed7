"""`qfarm search-server`: run a real OpenSearch node in the foreground (docs/retrieval.md,
'A real search node').

Builds the node's launcher with Maven on first use (and says so), starts one node on
loopback with its Lucene indices under ``--data``, prints the QFARM_* variables that point
the farm at it, and serves until Ctrl-C. Needs Java 17+ and Maven; the embedded backend
needs neither.
"""

from __future__ import annotations

import argparse
import shlex
import time
from pathlib import Path

from qfarm.common.errors import ServiceError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "search-server",
        help="run a real OpenSearch node (Java 17+ and Maven) in the foreground",
        description=(
            "Start one OpenSearch node (the server jars from Maven Central, built once into "
            "~/.cache/qfarm/search-node) on 127.0.0.1, print the QFARM_* variables that point "
            "the farm at it, and serve until Ctrl-C. Then `qfarm index --backend opensearch` "
            "fills it."
        ),
    )
    p.add_argument("--port", type=int, default=9200, help="HTTP port (default 9200; 0: a free one)")
    p.add_argument("--data", type=Path, default=None, metavar="DIR",
                   help="where the node keeps its indices (default: DATA_DIR/search-node, "
                        "QFARM_DATA_DIR or ~/.cache/qfarm); kept across restarts")
    p.add_argument("--heap", default="512m",
                   help="JVM heap, as java's -Xmx takes it (default 512m)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from qfarm.common.settings import Settings
    from qfarm.ops.search.launch import start_search_node

    data = args.data if args.data is not None else Settings().data_dir / "search-node"
    started = time.monotonic()
    with start_search_node(args.port, data_dir=data, heap=args.heap) as node:
        print(f"serving {node.description} at {node.url} "
              f"(ready in {time.monotonic() - started:.1f} s; log {node.log_path})")
        print("point the farm at it with:")
        for name, value in node.env().items():
            print(f"export {name}={shlex.quote(value)}")
        print("then fill it: qfarm index --backend opensearch. Ctrl-C stops it.", flush=True)
        while node.is_running():
            time.sleep(0.5)
        raise ServiceError(f"the search node exited (status {node.proc.returncode}): "
                           f"{node.log_tail(5) or 'no output'}")
