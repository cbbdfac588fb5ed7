"""`qfarm search-server`: run a real OpenSearch or Elasticsearch node in the foreground
(docs/retrieval.md, 'A real search node').

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
        help="run a real OpenSearch or Elasticsearch node (Java 17+ and Maven) in the foreground",
        description=(
            "Start one OpenSearch (or Elasticsearch) node, the server jars from Maven Central "
            "built once into ~/.cache/qfarm/search-node, on 127.0.0.1; print the QFARM_* "
            "variables that point the farm at it, and serve until Ctrl-C. Then `qfarm index` "
            "fills it."
        ),
    )
    p.add_argument("--engine", choices=("opensearch", "elasticsearch"), default="opensearch",
                   help="OpenSearch 2.19 (default), or Elasticsearch: 8.19 on Java 17-20, 9.x on "
                        "Java 21+ (--java-home)")
    p.add_argument("--java-home", type=Path, default=None, metavar="DIR",
                   help="the JDK to run the node on (default JAVA_HOME, else java on PATH)")
    p.add_argument("--port", type=int, default=9200, help="HTTP port (default 9200; 0: a free one)")
    p.add_argument("--data", type=Path, default=None, metavar="DIR",
                   help="where the node keeps its indices (default: DATA_DIR/ENGINE-node, "
                        "QFARM_DATA_DIR or ~/.cache/qfarm); kept across restarts")
    p.add_argument("--heap", default="512m",
                   help="JVM heap, as java's -Xmx takes it (default 512m)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from qfarm.common.settings import Settings
    from qfarm.ops.search.launch import build_search_node, start_search_node

    data = args.data if args.data is not None else Settings().data_dir / f"{args.engine}-node"
    build = build_search_node(args.engine, java_home=args.java_home)
    started = time.monotonic()
    with start_search_node(args.port, data_dir=data, heap=args.heap, build=build) as node:
        print(f"serving {node.description} at {node.url} "
              f"(ready in {time.monotonic() - started:.1f} s; log {node.log_path})")
        print("point the farm at it with:")
        for name, value in node.env().items():
            print(f"export {name}={shlex.quote(value)}")
        print(f"then fill it: qfarm index --backend {args.engine}. Ctrl-C stops it.", flush=True)
        while node.is_running():
            time.sleep(0.5)
        raise ServiceError(f"the search node exited (status {node.proc.returncode}): "
                           f"{node.log_tail(5) or 'no output'}")
