"""Test-only HTTP shim that lets the official ``elasticsearch`` client talk to an OpenSearch node.

Why: the tests' search engine is a real OpenSearch node, which speaks the OpenSearch
dialect of the same REST API. Two things stand between it and
the Elasticsearch client, both about headers, not about the API:

* the client sends ``Content-Type``/``Accept`` as
  ``application/vnd.elasticsearch+json; compatible-with=9`` (and
  ``…+x-ndjson`` for bulk/msearch), which OpenSearch refuses; the shim forwards them
  as plain ``application/json`` / ``application/x-ndjson``;
* the client refuses any answer without ``X-Elastic-Product: Elasticsearch``
  (its product check); the shim adds that header to every response.

Bodies, paths, methods and status codes pass through unchanged, so what the
tests exercise is the backend's real use of the Elasticsearch client.

``server_version`` makes the shim answer as an Elasticsearch server of that
version: ``GET /`` reports it, and a request whose media types ask for a newer
``compatible-with`` major is refused with HTTP 400
``media_type_header_exception``, as an 8.x server refuses the 9.x client.
"""

from __future__ import annotations

import http.client
import json
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


_WANTS = re.compile(r"compatible-with=(\d+)")


def _refusal(server_version: str, headers: dict[str, str]) -> bytes | None:
    """An 8.x-style refusal body when the request asks for a newer compatibility major."""
    server_major = int(server_version.split(".")[0])
    wanted = [int(m) for v in headers.values() for m in _WANTS.findall(v)]
    if not any(w > server_major for w in wanted):
        return None
    reason = "Invalid media-type value on headers [Accept, Content-Type]"
    error = {"type": "media_type_header_exception", "reason": reason}
    return json.dumps({"error": {"root_cause": [error], **error}, "status": 400}).encode()


def _as_elasticsearch(data: bytes, server_version: str) -> bytes:
    info = json.loads(data)
    info["version"] = {"number": server_version, "build_flavor": "default"}
    info["tagline"] = "You Know, for Search"
    return json.dumps(info).encode()


def _handler(upstream: str, server_version: str | None) -> type[BaseHTTPRequestHandler]:
    target = urlsplit(upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            if server_version is not None:
                refusal = _refusal(server_version, dict(self.headers.items()))
                if refusal is not None:
                    self.send_response(400)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("X-Elastic-Product", "Elasticsearch")
                    self.send_header("Content-Length", str(len(refusal)))
                    self.end_headers()
                    self.wfile.write(refusal)
                    return
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
            if server_version is not None and self.command == "GET" and self.path == "/":
                data = _as_elasticsearch(data, server_version)
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
def elasticsearch_shim(upstream: str, server_version: str | None = None) -> Iterator[str]:
    """Serve the shim on a free loopback port for the duration of the block; yields its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(upstream, server_version))
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
