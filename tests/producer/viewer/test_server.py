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
