"""The viewer's HTTP server: what an idle connection may hold."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

from qfarm.producer.viewer import server as viewer_server


def test_idle_connections_are_closed_and_their_threads_end(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(viewer_server, "IDLE_TIMEOUT_S", 3.0)
    srv = viewer_server.make_server(tmp_path, "127.0.0.1", 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    before = threading.active_count()
    conns = [socket.create_connection(srv.server_address[:2]) for _ in range(40)]
    try:
        deadline = time.monotonic() + 15
        while threading.active_count() > before and time.monotonic() < deadline:
            time.sleep(0.1)
        assert threading.active_count() <= before, "idle connections still hold threads"
        assert all(c.recv(1) == b"" for c in conns)  # the server closed them
    finally:
        for c in conns:
            c.close()
        srv.shutdown()
        srv.server_close()


def test_a_browser_without_a_token_gets_a_page_saying_how_to_log_in(tmp_path: Path) -> None:
    """401 either way; a browser (Accept: text/html) reads how to log in and gets a form
    that comes back to the page it asked for, a script keeps its one line."""
    import urllib.error
    import urllib.request

    from qfarm.producer.http import auth

    token = "viewer-token-0123456789abcdef"
    srv = viewer_server.make_server(tmp_path, "127.0.0.1", 0,
                                    tokens=auth.Tokens(((token.encode(), "ask"),)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{srv.server_address[1]}"

    def get(path: str, accept: str) -> tuple[int, str, str]:
        req = urllib.request.Request(base + path, headers={"Accept": accept})
        try:
            with urllib.request.urlopen(req) as resp:
                return resp.status, resp.headers["Content-Type"], resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers["Content-Type"], exc.read().decode()

    try:
        status, kind, body = get("/runs/r1?x=%3Cb%3E", "text/html,application/xhtml+xml")
        assert status == 401 and kind.startswith("text/html")
        assert "<code>QFARM_API_TOKENS</code>" in body and 'name="token"' in body
        assert 'action="/runs/r1"' in body and 'name="x" value="&lt;b&gt;"' in body
        status, kind, body = get("/?token=wrong-token-0123456789", "text/html")
        assert status == 401 and 'id=invalid' in body and 'name="token"' in body
        status, kind, body = get("/", "*/*")
        assert status == 401 and kind.startswith("text/plain") and "<" not in body
    finally:
        srv.shutdown()
        srv.server_close()
