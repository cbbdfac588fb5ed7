"""Hosts on one machine: Linux network namespaces on a private subnet, with links to cut.

A *hub* namespace holds a bridge; each host is a namespace with one veth pair to it
(``eth0`` inside, the other end on the bridge), and the test process reaches every host
over a control link of its own (a veth pair from the root namespace to the bridge) that
is never cut. ``cut(host)`` sets the host's end on the bridge down, as a pulled cable:
the host's processes keep running and see no reset, their packets simply go nowhere;
``restore(host)`` sets it up again; ``lose(host)`` kills every process in the host and
deletes it. ``popen(host, argv)`` runs a real process in the host (``ip netns exec``).

Needs root and ``ip`` (iproute2); ``available()`` says why not, for a skip line.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path


def available() -> str | None:
    """None when namespaces can be made here, else why not (one line)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if not shutil.which("ip"):
        return "needs iproute2's `ip`"
    probe = f"qfprobe{os.getpid() % 100000}"
    res = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if res.returncode != 0:
        return f"cannot create a network namespace: {res.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = ["ip", *(["-n", ns] if ns else []), *args]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if check and res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {res.stderr.strip()}")
    return res


@dataclass
class Host:
    name: str
    ns: str
    addr: str
    hub_end: str  # this host's veth end on the hub's bridge: the cable to cut


@dataclass
class Network:
    """A hub, hosts on a /24 and a control link from the test process."""

    tag: str = field(default_factory=lambda: f"q{os.getpid() % 100000}")
    hosts: dict[str, Host] = field(default_factory=dict)
    procs: list[subprocess.Popen] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.subnet = f"10.{77 + os.getpid() % 50}.{os.getpid() % 250}"
        self.hub = f"{self.tag}-hub"
        self.ctl_end = f"{self.tag}c"
        ip("netns", "add", self.hub)
        ip("link", "set", "lo", "up", ns=self.hub)
        ip("link", "add", "br0", "type", "bridge", ns=self.hub)
        ip("link", "set", "br0", "up", ns=self.hub)
        # The control link: the root namespace's end gets .254, its peer joins the bridge.
        ip("link", "add", self.ctl_end, "type", "veth", "peer", "name", f"{self.tag}C")
        ip("link", "set", f"{self.tag}C", "netns", self.hub)
        ip("link", "set", f"{self.tag}C", "master", "br0", ns=self.hub)
        ip("link", "set", f"{self.tag}C", "up", ns=self.hub)
        ip("addr", "add", f"{self.subnet}.254/24", "dev", self.ctl_end)
        ip("link", "set", self.ctl_end, "up")

    def add(self, name: str) -> Host:
        n = len(self.hosts) + 1
        ns, hub_end = f"{self.tag}-{name}", f"{self.tag}h{n}"
        ip("netns", "add", ns)
        ip("link", "set", "lo", "up", ns=ns)
        ip("link", "add", hub_end, "type", "veth", "peer", "name", "eth0", "netns", ns)
        ip("link", "set", hub_end, "netns", self.hub)
        ip("link", "set", hub_end, "master", "br0", ns=self.hub)
        ip("link", "set", hub_end, "up", ns=self.hub)
        addr = f"{self.subnet}.{n}"
        ip("addr", "add", f"{addr}/24", "dev", "eth0", ns=ns)
        ip("link", "set", "eth0", "up", ns=ns)
        host = self.hosts[name] = Host(name, ns, addr, hub_end)
        return host

    def popen(self, host: Host, argv: Sequence[str], *, env: Mapping[str, str], log: Path,
              cwd: Path | None = None) -> subprocess.Popen:  # fmt: skip
        proc = subprocess.Popen(["ip", "netns", "exec", host.ns, *argv], env=dict(env), cwd=cwd,
                                stdout=log.open("ab"), stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
        self.procs.append(proc)
        return proc

    def run(self, host: Host, argv: Sequence[str], *, env: Mapping[str, str], cwd: Path | None = None,
            timeout_s: float = 120) -> subprocess.CompletedProcess[str]:  # fmt: skip
        return subprocess.run(["ip", "netns", "exec", host.ns, *argv], env=dict(env), cwd=cwd,
                              capture_output=True, text=True, timeout=timeout_s)  # fmt: skip

    def cut(self, host: Host) -> float:
        """Pull the host's cable; returns when (time.time())."""
        ip("link", "set", host.hub_end, "down", ns=self.hub)
        return time.time()

    def restore(self, host: Host) -> float:
        ip("link", "set", host.hub_end, "up", ns=self.hub)
        return time.time()

    def pids(self, host: Host) -> list[int]:
        res = ip("netns", "pids", host.ns, check=False)
        return [int(p) for p in res.stdout.split()]

    def lose(self, host: Host) -> None:
        """The host is gone for good: every process in it is killed, then the namespace."""
        for _ in range(3):  # a supervisor may start a child between two looks
            for pid in self.pids(host):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.2)
        ip("netns", "del", host.ns, check=False)
        self.hosts.pop(host.name, None)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for host in list(self.hosts.values()):
            self.lose(host)
        ip("link", "del", self.ctl_end, check=False)
        ip("netns", "del", self.hub, check=False)
