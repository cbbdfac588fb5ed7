"""Test-only HTTP shim that lets the official ``elasticsearch`` client talk to osmem-server.

Why: no Elasticsearch server can be installed here, and osmem-server speaks
the OpenSearch dialect of the same REST API. Two things stand between it and
the Elasticsearch client, both about headers, not about the API:

* the client sends ``Content-Type``/``Accept`` as
  ``application/vnd.elasticsearch+json; compatible-with=9`` (and
  ``…+x-ndjson`` for bulk/msearch), which osmem refuses; the shim forwards them
  as plain ``application/json`` / ``application/x-ndjson``;
* the client refuses any answer without ``X-Elastic-Product: Elasticsearch``
  (its product check); the shim adds that header to every response.

Bodies, paths, methods and status codes pass through unchanged, so what the
tests exercise is the backend's real use of the Elasticsearch client.
"""

from __future__ import annotations

import http.client
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_COMPAT = re.compile(r"application/vnd\.elasticsearch\+([\w-]+)(\s*;\s*compatible-with=\d+)?")
_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-length",
    "host",
    "accept-encoding",
}
# Set by the shim itself (send_response adds Date/Server): never forwarded twice.
_OWN = {"date", "server", "x-elastic-product"}


def plain_content_type(value: str) -> str:
    """``application/vnd.elasticsearch+json; compatible-with=9`` → ``application/json``."""
    return _COMPAT.sub(r"application/\1", value)


def _handler(upstream: str) -> type[BaseHTTPRequestHandler]:
    target = urlsplit(upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {
                k: plain_content_type(v) if k.lower() in ("content-type", "accept") else v
                for k, v in self.headers.items()
                if k.lower() not in _HOP_BY_HOP
            }
            conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            finally:
                conn.close()
            self.send_response(resp.status)
            for key, value in resp.getheaders():
                if key.lower() not in _HOP_BY_HOP | _OWN:
                    self.send_header(key, value)
            self.send_header("X-Elastic-Product", "Elasticsearch")
            self.send_header("Content-Length", str(0 if self.command == "HEAD" else len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _forward

        def log_message(self, format: str, *args: object) -> None:  # quiet in tests
            return

    return Handler


@contextmanager
def elasticsearch_shim(upstream: str) -> Iterator[str]:
    """Serve the shim on a free loopback port for the duration of the block; yields its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(upstream))
    server.daemon_threads = True
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
