"""``qfarm view``: the viewer on the standard library's threading HTTP server.

Read-only pages; on a loopback address they need no login. On any other address
``qfarm view`` needs ``QFARM_API_TOKENS`` and then asks for a token the way ``qfarm
serve`` does (``producer/http/auth.py``): a bearer header, or ``/?token=T`` once,
which sets a cookie and redirects to the same page without the token. A browser
refused for want of a token gets a page saying so, with a form to enter it
(``qfarm.producer.viewer.login``).
"""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from qfarm.producer.http import auth
from qfarm.producer.viewer.html import Response
from qfarm.producer.viewer.login import gate
from qfarm.producer.viewer.router import Viewer


def make_server(
    results_dir: Path,
    host: str = "127.0.0.1",
    port: int = 8765,
    *,
    redis_url: str | None = None,
    index_path: Path | None = None,
    tokens: auth.Tokens | None = None,
) -> ThreadingHTTPServer:
    """The viewer's server; a non-loopback ``host`` without ``tokens`` is a ConfigError."""
    known = tokens or auth.Tokens(())
    auth.check_bind(host, known)
    viewer = Viewer(results_dir, redis_url=redis_url, index_path=index_path)

    class Handler(BaseHTTPRequestHandler):
        # A connection that sends nothing for this long is closed, and its thread ends: a
        # client holding hundreds of idle connections cannot hold as many threads.
        timeout = IDLE_TIMEOUT_S

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            pairs = parse_qsl(url.query)
            refused = gate(known, url.path, pairs, cookie=self.headers.get("Cookie"),
                           authorization=self.headers.get("Authorization"),
                           accept=self.headers.get("Accept"))  # fmt: skip
            if refused is not None:
                self._send(refused.status, refused.content_type, refused.body, refused.headers)
                return
            query = {k: v for k, v in pairs if k != "token"}
            resp = viewer.handle(url.path, query)
            if resp.stream is None:
                self._send(resp.status, resp.content_type, resp.body, resp.headers)
            else:
                send_stream(self, resp)

        def _send(self, status: int, content_type: str, body: bytes,
                  headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # one line per request would drown the terminal (and a log holds no token)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


IDLE_TIMEOUT_S = 30.0


def send_stream(handler: BaseHTTPRequestHandler, resp: Response) -> None:
    """An export: no length known in advance, so the body ends when the connection does
    (this server speaks HTTP/1.0); pieces leave as they are read."""
    handler.send_response(resp.status)
    for name, value in {"Content-Type": resp.content_type, "Cache-Control": "no-store",
                        "Connection": "close", **resp.headers}.items():
        handler.send_header(name, value)
    handler.end_headers()
    try:
        for piece in resp.stream or ():
            handler.wfile.write(piece)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the browser stopped the download
    handler.close_connection = True
