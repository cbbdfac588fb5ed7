"""Start the simulator as a subprocess and wait until it answers ``/health``.

``qfarm sweep``/``ask`` call ``start_simulator()`` when no endpoint is
configured; tests and benchmarks start several with different options. The
child binds the port itself (port 0 → a free loopback port, no race) and
writes it to a file; its output goes to a log file so a full pipe can never
block it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from qfarm.common.errors import ServiceError
from qfarm.ops.process import ServerProcess
from qfarm.ops.sim.config import options_to_argv

START_TIMEOUT_S = 30.0


class SimulatorHandle(ServerProcess):
    """A running simulator subprocess; ``stop()`` (or ``with``) ends it."""

    LOG_NAME = "sim.log"

    def kill(self) -> None:
        """SIGKILL at once: an endpoint dying mid-run."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5.0)

    def set_faults(self, **payload: Any) -> dict[str, Any]:
        """``POST /sim/faults``: e.g. ``rates={"503": 1.0}``, ``next=["429"]``, ``down=True``."""
        resp = httpx.post(f"{self.url}/sim/faults", json=payload, timeout=5.0)
        resp.raise_for_status()
        return resp.json()

    def stats(self, since: int = 0) -> dict[str, Any]:
        resp = httpx.get(f"{self.url}/sim/stats", params={"since": since}, timeout=5.0)
        resp.raise_for_status()
        return resp.json()

    def reset(self) -> None:
        httpx.post(f"{self.url}/sim/reset", timeout=5.0).raise_for_status()

    def __repr__(self) -> str:
        return f"SimulatorHandle(url={self.url!r}, pid={self.pid})"


def start_simulator(host: str = "127.0.0.1", port: int = 0, **options: Any) -> SimulatorHandle:
    """Start ``python -m qfarm.ops.sim`` and return once ``/health`` answers 200.

    ``options`` are the simulator's settings by name (``max_num_seqs=8``,
    ``ttft_ms=0``, ``tpot_ms=(10, 15)``, ``latency="zero"``, ``profile="clean"``,
    ``rates={...}``, ``fault_rates={"429": 0.1}``, ``api_key=...``,
    ``shuffle_choices=True``, ...; see ``qfarm.ops.sim.config``).
    """
    api_key = options.pop("api_key", None)
    argv_opts = options_to_argv(**options)
    workdir = Path(tempfile.mkdtemp(prefix="qfarm-sim-"))
    port_file = workdir / "port"
    log = (workdir / "sim.log").open("wb")
    cmd = [sys.executable, "-m", "qfarm.ops.sim", "--host", host, "--port", str(port),
           "--port-file", str(port_file), *argv_opts]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("QFARM_SIM_API_KEY", None)
    if api_key:
        env["QFARM_SIM_API_KEY"] = api_key
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
    )
    log.close()
    handle = SimulatorHandle(proc, "", workdir)
    try:
        handle.url = f"http://{host}:{_wait_for_port(proc, port_file, handle)}"
        _wait_for_health(handle)
    except BaseException:
        tail = handle.log_tail()
        handle.stop()
        if isinstance(tail, str) and tail:
            sys.stderr.write(tail + "\n")
        raise
    return handle


def _wait_for_port(proc: subprocess.Popen[bytes], port_file: Path, handle: SimulatorHandle) -> int:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if port_file.exists():
            return int(port_file.read_text())
        if proc.poll() is not None:
            raise ServiceError(
                f"the vLLM simulator exited at start (status {proc.returncode}): "
                f"{handle.log_tail(5) or 'no output'}"
            )
        time.sleep(0.02)
    raise ServiceError(f"the vLLM simulator did not bind a port within {START_TIMEOUT_S:.0f} s")


def _wait_for_health(handle: SimulatorHandle) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{handle.url}/health", timeout=1.0).status_code == 200:
                return
        time.sleep(0.02)
    raise ServiceError(f"the vLLM simulator at {handle.url} did not answer /health")
