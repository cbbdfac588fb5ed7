"""A server the farm starts as a subprocess (the simulator, the local model): its process,
URL and working folder, and how it is stopped."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Self


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
