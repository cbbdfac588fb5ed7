"""``qfarm view``: the viewer on the standard library's threading HTTP server.

Read-only pages for one operator on a trusted host; a front-door server can
mount ``Viewer.handle`` instead.
"""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from producer.viewer.pages import Viewer


def make_server(
    results_dir: Path,
    host: str = "127.0.0.1",
    port: int = 8765,
    *,
    redis_url: str | None = None,
    index_path: Path | None = None,
) -> ThreadingHTTPServer:
    viewer = Viewer(results_dir, redis_url=redis_url, index_path=index_path)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlsplit(self.path)
            resp = viewer.handle(url.path, dict(parse_qsl(url.query)))
            self.send_response(resp.status)
            self.send_header("Content-Type", resp.content_type)
            self.send_header("Content-Length", str(len(resp.body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(resp.body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # one line per request would drown the terminal while pages poll

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server
