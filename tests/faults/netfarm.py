"""A farm spread over namespace hosts (tests/faults/netns.py): Redis, simulators, fault
proxies and supervised worker roles, each on a host of its own.

Worker hosts run the farm's own supervision: ``python -m qfarm.ops.farm up`` started inside the
host's namespace, so supervisord and the roles it restarts live on that host (and die
with it when it is lost). The test process (and the producer, unless a scenario puts it
on a host) reaches every host over the control link, which is never cut.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netns import Host, Network  # type: ignore[import-not-found]

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
REDIS_PORT = 6379
PROXY_PORT = 7000  # the proxy's data port; its control port is the next one


@dataclass
class WorkerHost:
    host: Host
    dir: Path
    env: dict[str, str]
    roles: str

    def farm(self, *args: str, timeout_s: float = 120) -> Any:
        import subprocess

        return subprocess.run([sys.executable, "-m", "qfarm.ops.farm", "--dir", str(self.dir), *args], cwd=REPO,
                              env=self.env, capture_output=True, text=True, timeout=timeout_s)  # fmt: skip

    def log(self, role: str) -> str:
        path = self.dir / f"{role}.log"
        return path.read_text(errors="replace") if path.exists() else ""


@dataclass
class NetFarm:
    """One test's hosts. ``base_env`` carries the farm's QFARM_* settings."""

    net: Network
    tmp: Path
    base_env: dict[str, str]
    workers: list[WorkerHost] = field(default_factory=list)

    def _log(self, name: str) -> Path:
        logs = self.tmp / "hosts"
        logs.mkdir(exist_ok=True)
        return logs / f"{name}.log"

    def redis(self, host: Host) -> str:
        """redis-server on ``host``; returns its URL as other hosts reach it."""
        self.net.popen(host, ["redis-server", "--port", str(REDIS_PORT), "--bind", "0.0.0.0",
                              "--protected-mode", "no", "--save", "", "--appendonly", "no",
                              "--dir", str(self.tmp)],
                       env=os.environ, log=self._log(host.name))  # fmt: skip
        url = f"redis://{host.addr}:{REDIS_PORT}/0"
        import redis

        client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        assert _until(lambda: _pings(client), 20), f"redis on {host.name} did not start"
        return url

    def proxy(self, host: Host, to: tuple[str, int], port: int = PROXY_PORT) -> tuple[str, tuple[str, int]]:
        """A fault proxy on ``host`` to ``to``; returns its address (host:port) and control address."""
        self.net.popen(host, [sys.executable, str(HERE / "faultproxy.py"), "--listen", f"0.0.0.0:{port}",
                              "--to", f"{to[0]}:{to[1]}", "--control", f"0.0.0.0:{port + 1}"],
                       env=os.environ, log=self._log(f"{host.name}-proxy{port}"))  # fmt: skip
        ctl = (host.addr, port + 1)
        assert _until(lambda: _answers(ctl), 20), f"proxy on {host.name} did not start"
        return f"{host.addr}:{port}", ctl

    def simulator(self, host: Host, port: int = 8000, *, ttft_ms: int = 50, tpot_ms: int = 20,
                  wait: bool = True) -> str:  # fmt: skip
        """A simulator on ``host``; returns its URL (``wait_http`` waits for one not waited for)."""
        self.net.popen(host, [sys.executable, "-m", "qfarm.ops.sim", "--host", "0.0.0.0", "--port", str(port),
                              "--ttft-ms", str(ttft_ms), "--tpot-ms", str(tpot_ms), "--max-num-seqs", "256"],
                       env=os.environ, cwd=REPO, log=self._log(f"{host.name}-sim"))  # fmt: skip
        url = f"http://{host.addr}:{port}"
        if wait:
            self.wait_http(url)
        return url

    @staticmethod
    def wait_http(url: str) -> None:
        assert _until(lambda: _http_ok(url + "/v1/models"), 60), f"simulator at {url} did not start"

    def up(self, host: Host, roles: str, *, wait: bool = True, **env: str) -> WorkerHost:
        """Supervised roles on ``host`` (supervisord in the host's namespace); without
        ``wait``, ``wait_running`` waits for them (hosts then start side by side)."""
        wenv = {**self.base_env, "FARM_HOME": str(REPO), "FARM_STARTSECS": "2", "FARM_NODE": host.name,
                "FARM_STOPWAITSECS": "10", **env}
        wh = WorkerHost(host, self.tmp / f"farm-{host.name}", wenv, roles)
        res = self.net.run(host, [sys.executable, "-m", "qfarm.ops.farm", "--dir", str(wh.dir), "up", "--roles", roles,
                                  "--wait", "90" if wait else "0"], env=wenv, cwd=REPO, timeout_s=150)  # fmt: skip
        self.workers.append(wh)
        assert res.returncode == 0, res.stderr + "".join(wh.log(r)[-2000:] for r in roles.split(","))
        return wh

    def wait_running(self, timeout_s: float = 90) -> None:
        def running(wh: WorkerHost) -> bool:
            out = wh.farm("status").stdout
            return out.count("RUNNING") == len(wh.roles.split(","))

        for wh in self.workers:
            assert _until(lambda w=wh: running(w), timeout_s, poll_s=0.5), \
                wh.farm("status").stdout + "".join(wh.log(r)[-2000:] for r in wh.roles.split(","))

    def close(self) -> None:
        self.net.close()  # every host's processes, supervisord included, are killed with it


def _until(predicate: Any, timeout_s: float, poll_s: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll_s)
    return False


def _pings(client: Any) -> bool:
    try:
        return bool(client.ping())
    except Exception:  # noqa: BLE001 - not up yet
        return False


def _answers(ctl: tuple[str, int]) -> bool:
    from faultproxy import control  # type: ignore[import-not-found]

    try:
        return control(ctl, "stats")[0].startswith("connections=")
    except OSError:
        return False


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200 and bool(json.loads(r.read()))
    except Exception:  # noqa: BLE001 - not up yet
        return False
