"""A server the farm starts as a subprocess (the simulator, the local model, a search node):
its process, URL and working folder, how it is started on a free port, and how it is
stopped."""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Self, TypeVar

from qfarm.common.errors import ServiceError


class ServerProcess:
    """A running server subprocess with its log in ``workdir``; ``stop()`` (or ``with``)
    ends it and removes ``workdir``."""

    LOG_NAME = "server.log"
    STOP_TIMEOUT_S = 5.0

    def __init__(self, proc: subprocess.Popen[bytes], url: str, workdir: Path):
        self.proc = proc
        self.url = url
        self.workdir = workdir
        self.log_path = workdir / self.LOG_NAME

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def is_running(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout_s: float | None = None) -> None:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout_s``."""
        timeout_s = self.STOP_TIMEOUT_S if timeout_s is None else timeout_s
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=timeout_s)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def log_tail(self, n: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        return ""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class PortTaken(Exception):
    """The server could not bind its port (another process took it after it was picked)."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


Handle = TypeVar("Handle", bound=ServerProcess)


def start_on_port(port: int, spawn: Callable[[int], Handle], wait: Callable[[Handle], None], *,
                  what: str, host: str = "127.0.0.1") -> Handle:
    """``spawn(port)`` then ``wait(handle)``; ``port`` 0 picks a free one, and a start whose
    ``wait`` raises ``PortTaken`` (the port was taken before the server bound it) is tried
    once more on another. On any other failure the server is stopped and its log's tail
    printed before the error goes on."""
    attempts = 1 if port else 2
    for attempt in range(attempts):
        handle = spawn(port or free_port(host))
        try:
            wait(handle)
            return handle
        except PortTaken:
            handle.stop()
            if attempt + 1 == attempts:
                raise ServiceError(f"{what}: port {handle.port} is in use; pick another --port") from None
        except BaseException:
            tail = handle.log_tail()
            handle.stop()
            if tail:
                sys.stderr.write(tail + "\n")
            raise
    raise AssertionError("unreachable")
