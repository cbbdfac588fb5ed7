"""Start a real OpenSearch node (one JVM, Lucene indices on disk) and wait until it serves.

``qfarm search-server`` runs one in the foreground; the tests start one per session on a
free port and a temporary directory. The node is OpenSearch's own server jar with its
HTTP transport (``transport-netty4-client``) and ``analysis-common`` (the ``english``
analyzer the farm's mapping names), all from Maven Central, loaded on the classpath by a
launcher of a few dozen lines (``node/``). Maven builds the launcher once and writes the
classpath; its local repository (``~/.m2``) caches the jars, so later builds need no
network.

What a user needs: Java 17 or newer and Maven (``apt-get install openjdk-17-jdk-headless
maven`` on Debian). ``make run`` and the embedded backend need neither.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from qfarm.common.errors import ConfigError, ServiceError
from qfarm.ops.process import ServerProcess

PROJECT = Path(__file__).resolve().parent / "node"
ENGINE = "OpenSearch"
# The heap a node gets unless told otherwise: the default corpus's index is about 15 MB,
# and 512 MiB leaves room for bulk requests of 10 MB and a few hundred open searches.
DEFAULT_HEAP = "512m"
START_TIMEOUT_S = 120.0
BUILD_TIMEOUT_S = 900.0
INSTALL_HINT = "install Java 17+ and Maven (Debian: apt-get install openjdk-17-jdk-headless maven)"
MAIN_CLASS = "qfarm.search.SearchNode"


def build_dir() -> Path:
    """Where the compiled launcher and its classpath live (outside any checkout or
    site-packages, which may be read-only): ``$XDG_CACHE_HOME/qfarm/search-node``."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "qfarm" / "search-node"


def _sources_digest() -> str:
    """What the build is made from: a change to the pom or the launcher rebuilds it."""
    h = hashlib.sha256()
    for path in sorted(p for p in PROJECT.rglob("*") if p.is_file() and "target" not in p.parts):
        h.update(str(path.relative_to(PROJECT)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class NodeBuild:
    """A built launcher: the ``java`` command line that starts a node, less its arguments."""

    java: str
    classpath: str

    def command(self, heap: str) -> list[str]:
        return [self.java, f"-Xms{heap}", f"-Xmx{heap}",
                # The node's own launcher sets these; an embedded node needs them too.
                "-Dlog4j2.disable.jmx=true", "-Dio.netty.noUnsafe=true", "-Djava.awt.headless=true",
                "-XX:+UseG1GC", "-cp", self.classpath, MAIN_CLASS]  # fmt: skip


def find_java() -> str:
    """``$JAVA_HOME/bin/java``, else ``java`` on PATH; ConfigError if neither is 17+."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise ConfigError(f"the search node needs Java: no java found; {INSTALL_HINT}")
    out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    text = out.stderr or out.stdout
    version = text.split('"')[1] if '"' in text else ""
    major = version.split(".")[0]
    if not major.isdigit() or int(major) < 17:
        raise ConfigError(f"the search node needs Java 17 or newer, {java} is {version or text!r}; "
                          f"{INSTALL_HINT} (or set JAVA_HOME)")
    return java


def build_search_node(*, announce: bool = True) -> NodeBuild:
    """Compile the launcher and resolve the node's jars unless an up-to-date build exists.

    ``announce`` says so on stderr before a build, which takes about 15 s with the jars
    cached and a minute or more the first time Maven fetches them.
    """
    java = find_java()
    out = build_dir()
    stamp = out / "built-from"
    digest = _sources_digest()
    classpath_file = out / "classpath.txt"
    if stamp.exists() and stamp.read_text() == digest and classpath_file.exists():
        return NodeBuild(java, f"{out / 'classes'}{os.pathsep}{classpath_file.read_text().strip()}")
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ConfigError(f"building the search node needs Maven: mvn not found; {INSTALL_HINT}")
    if announce:
        print(f"building the {ENGINE} node launcher with Maven into {out} (once; the first "
              "build fetches the jars from Maven Central)...", file=sys.stderr, flush=True)
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ}
    if not os.environ.get("JAVA_HOME"):
        env["JAVA_HOME"] = str(Path(java).resolve().parent.parent)
    proc = subprocess.run(
        [mvn, "-q", "-B", "-f", str(PROJECT / "pom.xml"), f"-Dqfarm.build.dir={out}", "compile"],
        capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, env=env,
    )  # fmt: skip
    if proc.returncode != 0 or not classpath_file.exists():
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise ServiceError(f"building the search node failed (mvn exit {proc.returncode}):\n{tail}")
    stamp.write_text(digest)
    return NodeBuild(java, f"{out / 'classes'}{os.pathsep}{classpath_file.read_text().strip()}")


class SearchNodeHandle(ServerProcess):
    """A running OpenSearch node; ``stop()`` (or ``with``) ends it and removes its temp dir.

    A data directory given by the caller is kept; one the launcher made is not.
    """

    LOG_NAME = "search-node.log"
    STOP_TIMEOUT_S = 30.0

    def __init__(self, proc: subprocess.Popen[bytes], url: str, workdir: Path, *,
                 data_dir: Path, heap: str):
        super().__init__(proc, url, workdir)
        self.data_dir = data_dir
        self.heap = heap
        self.version = ""

    @property
    def description(self) -> str:
        return f"{ENGINE} {self.version} (one node, heap {self.heap}, data {self.data_dir})"

    def env(self) -> dict[str, str]:
        """The QFARM_* variables that point the farm at this node."""
        return {"QFARM_RETRIEVER": "opensearch", "QFARM_ES_URL": self.url}

    def __repr__(self) -> str:
        return f"SearchNodeHandle(url={self.url!r}, pid={self.pid})"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def start_search_node(
    port: int = 0,
    *,
    data_dir: Path | None = None,
    heap: str = DEFAULT_HEAP,
    settings: Mapping[str, Any] | None = None,
    timeout_s: float = START_TIMEOUT_S,
    build: NodeBuild | None = None,
) -> SearchNodeHandle:
    """Start a node on 127.0.0.1:``port`` (0: a free one); return once the cluster is
    yellow or green. ``settings`` are node settings (``-E key=value``), e.g. a search
    thread pool's size and queue."""
    if not 0 <= port <= 65535:
        raise ConfigError(f"--port {port}: a TCP port is 0-65535 (0 picks a free one)")
    if not re.fullmatch(r"[1-9][0-9]*[kKmMgG]?", heap):
        raise ConfigError(f"--heap {heap!r}: give a size as java's -Xmx takes it, e.g. 512m or 2g")
    build = build or build_search_node()
    attempts = 1 if port else 2  # a picked port can be taken before the node binds it
    for attempt in range(attempts):
        handle = _spawn(build, port or free_port(), data_dir, heap, settings or {})
        try:
            _wait_until_ready(handle, timeout_s)
            return handle
        except _PortTaken:
            handle.stop()
            if attempt + 1 == attempts:
                raise ServiceError(f"search node: port {handle.port} is in use; pick another --port") from None
        except BaseException:
            tail = handle.log_tail()
            handle.stop()
            if tail:
                sys.stderr.write(tail + "\n")
            raise
    raise AssertionError("unreachable")


class _PortTaken(Exception):
    pass


def _spawn(build: NodeBuild, port: int, data_dir: Path | None, heap: str,
           settings: Mapping[str, Any]) -> SearchNodeHandle:
    workdir = Path(tempfile.mkdtemp(prefix="qfarm-search-"))
    data = Path(data_dir) if data_dir is not None else workdir / "node"
    cmd = [*build.command(heap), "--port", str(port), "--transport-port", str(free_port()),
           "--data", str(data)]  # fmt: skip
    for key, value in settings.items():
        cmd += ["-E", f"{key}={value}"]
    log = (workdir / SearchNodeHandle.LOG_NAME).open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    log.close()
    return SearchNodeHandle(proc, f"http://127.0.0.1:{port}", workdir, data_dir=data, heap=heap)


def _wait_until_ready(handle: SearchNodeHandle, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if handle.proc.poll() is not None:
            tail = handle.log_tail(8)
            if "BindException" in tail or "address already in use" in tail.lower():
                raise _PortTaken
            raise ServiceError(f"the search node exited at start (status {handle.proc.returncode}): "
                               f"{tail or 'no output'}")
        with contextlib.suppress(httpx.HTTPError, ValueError):
            health = httpx.get(f"{handle.url}/_cluster/health", timeout=2.0)
            if health.status_code == 200 and health.json().get("status") in ("yellow", "green"):
                handle.version = str(httpx.get(handle.url, timeout=2.0).json()["version"]["number"])
                return
        time.sleep(0.2)
    raise ServiceError(f"the search node at {handle.url} did not become ready within {timeout_s:.0f} s")
