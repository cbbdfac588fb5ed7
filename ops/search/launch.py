"""Start a real search node (one JVM, Lucene indices on disk) and wait until it serves.

``qfarm search-server`` runs one in the foreground; the tests start them on free ports and
temporary directories. Two engines, each the engine's own server jars from Maven Central
loaded on the classpath by a launcher of our own, built once with Maven (its local
repository, ``~/.m2``, caches the jars, so later builds need no network):

* ``opensearch`` (``node/``): OpenSearch 2.19 with its HTTP transport
  (``transport-netty4-client``) and ``analysis-common`` (the ``english`` analyzer the
  farm's mapping names). Java 17+.
* ``elasticsearch`` (``es-node/``): Elasticsearch's server and ``transport-netty4``; the
  JDK picks the line: 8.19 under Java 17-20, 9.x under Java 21+ (9.x is built for 21).
  Elastic publishes no other module to Maven Central, so the launcher brings the
  ``english`` analyzer (Lucene's ``EnglishAnalyzer``) and ``GET /`` itself
  (``es-node/README.md``).

What a user needs: Java 17 or newer and Maven (``apt-get install openjdk-17-jdk-headless
maven`` on Debian). ``make run`` and the embedded backend need neither.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
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
from qfarm.common.vocab import Backend
from qfarm.ops.process import PortTaken, ServerProcess, free_port, start_on_port

HERE = Path(__file__).resolve().parent
# The heap a node gets unless told otherwise: the default corpus's index is about 15 MB,
# and 512 MiB leaves room for bulk requests of 10 MB and a few hundred open searches.
DEFAULT_HEAP = "512m"
START_TIMEOUT_S = 120.0
BUILD_TIMEOUT_S = 900.0
INSTALL_HINT = "install Java 17+ and Maven (Debian: apt-get install openjdk-17-jdk-headless maven)"


@dataclass(frozen=True)
class Engine:
    """A search engine the launcher can start: its Maven project and its main class."""

    backend: Backend
    name: str
    project: Path
    main_class: str


ENGINES = {
    Backend.OPENSEARCH: Engine(Backend.OPENSEARCH, "OpenSearch", HERE / "node", "qfarm.search.SearchNode"),
    Backend.ELASTICSEARCH: Engine(Backend.ELASTICSEARCH, "Elasticsearch", HERE / "es-node",
                                  "qfarm.search.ElasticsearchNode"),
}  # fmt: skip


def engine_of(name: str) -> Engine:
    try:
        return ENGINES[Backend(name)]
    except ValueError:
        pass
    raise ConfigError(f"--engine {name!r}: expected one of {', '.join(ENGINES)}")


def build_dir(engine: Engine, java_major: int) -> Path:
    """Where a launcher and its classpath live (outside any checkout or site-packages,
    which may be read-only): ``$XDG_CACHE_HOME/qfarm/search-node/<engine>-java<N>``."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "qfarm" / "search-node" / f"{engine.backend}-java{java_major}"


def _sources_digest(engine: Engine, java: str) -> str:
    """What the build is made from: a change to the pom, the launcher or the JDK rebuilds it."""
    h = hashlib.sha256(java.encode())
    project = engine.project
    for path in sorted(p for p in project.rglob("*") if p.is_file() and "target" not in p.parts):
        h.update(str(path.relative_to(project)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class NodeBuild:
    """A built launcher: the ``java`` command line that starts a node, less its arguments."""

    engine: Engine
    java: str
    classpath: str

    def command(self, heap: str) -> list[str]:
        return [self.java, f"-Xms{heap}", f"-Xmx{heap}",
                # The engines' own launchers set these; an embedded node needs them too.
                "-Dlog4j2.disable.jmx=true", "-Dio.netty.noUnsafe=true", "-Djava.awt.headless=true",
                "-XX:+UseG1GC", "-cp", self.classpath, self.engine.main_class]  # fmt: skip


def find_java(java_home: str | Path | None = None) -> tuple[str, int]:
    """``java_home``'s, else ``$JAVA_HOME``'s, else PATH's ``java`` and its major version;
    ConfigError unless it is 17 or newer."""
    home = str(java_home) if java_home else os.environ.get("JAVA_HOME")
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
    return java, int(major)


def find_jdk(min_major: int) -> Path | None:
    """A JDK home of at least ``min_major`` among ``$JAVA_HOME``, PATH's java and the
    system's (``/usr/lib/jvm``), or None: Elasticsearch 9 wants Java 21 where the
    default JDK is 17."""
    candidates = [os.environ.get("JAVA_HOME"), shutil.which("java")]
    candidates += sorted(str(p) for p in Path("/usr/lib/jvm").glob("*") if (p / "bin" / "java").exists())
    for candidate in filter(None, candidates):
        path = Path(candidate)
        home = path.resolve().parent.parent if path.name == "java" else path
        with contextlib.suppress(ConfigError, OSError, subprocess.SubprocessError):
            if find_java(home)[1] >= min_major:
                return home
    return None


def build_search_node(engine: str | Engine = Backend.OPENSEARCH, *, java_home: str | Path | None = None,
                      announce: bool = True) -> NodeBuild:
    """Compile ``engine``'s launcher and resolve its jars unless an up-to-date build exists.

    ``announce`` says so on stderr before a build, which takes about 10-15 s with the jars
    cached and a minute or more the first time Maven fetches them.
    """
    engine = engine if isinstance(engine, Engine) else engine_of(engine)
    java, major = find_java(java_home)
    out = build_dir(engine, major)
    stamp = out / "built-from"
    digest = _sources_digest(engine, java)
    classpath_file = out / "classpath.txt"
    if not (stamp.exists() and stamp.read_text() == digest and classpath_file.exists()):
        _maven_build(engine, java, out, announce=announce)
        stamp.write_text(digest)
    return NodeBuild(engine, java, f"{out / 'classes'}{os.pathsep}{classpath_file.read_text().strip()}")


def _maven_build(engine: Engine, java: str, out: Path, *, announce: bool) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ConfigError(f"building the search node needs Maven: mvn not found; {INSTALL_HINT}")
    if announce:
        print(f"building the {engine.name} node launcher with Maven into {out} (once; the first "
              "build fetches the jars from Maven Central)...", file=sys.stderr, flush=True)
    out.mkdir(parents=True, exist_ok=True)
    # The JDK that runs Maven is the one the node runs on (and picks Elasticsearch's line).
    env = {**os.environ, "JAVA_HOME": str(Path(java).resolve().parent.parent)}
    proc = subprocess.run(
        [mvn, "-q", "-B", "-f", str(engine.project / "pom.xml"), f"-Dqfarm.build.dir={out}", "compile"],
        capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, env=env,
    )  # fmt: skip
    if proc.returncode != 0 or not (out / "classpath.txt").exists():
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise ServiceError(f"building the {engine.name} node failed (mvn exit {proc.returncode}):\n{tail}")


class SearchNodeHandle(ServerProcess):
    """A running OpenSearch node; ``stop()`` (or ``with``) ends it and removes its temp dir.

    A data directory given by the caller is kept; one the launcher made is not.
    """

    LOG_NAME = "search-node.log"
    STOP_TIMEOUT_S = 30.0

    def __init__(self, proc: subprocess.Popen[bytes], url: str, workdir: Path, *,
                 engine: Engine, data_dir: Path, heap: str):
        super().__init__(proc, url, workdir)
        self.engine = engine
        self.data_dir = data_dir
        self.heap = heap
        self.version = ""

    @property
    def description(self) -> str:
        return f"{self.engine.name} {self.version} (one node, heap {self.heap}, data {self.data_dir})"

    def env(self) -> dict[str, str]:
        """The QFARM_* variables that point the farm at this node."""
        return {"QFARM_RETRIEVER": str(self.engine.backend), "QFARM_ES_URL": self.url}

    def __repr__(self) -> str:
        return f"SearchNodeHandle(url={self.url!r}, pid={self.pid})"


def start_search_node(
    port: int = 0,
    *,
    data_dir: Path | None = None,
    heap: str = DEFAULT_HEAP,
    settings: Mapping[str, Any] | None = None,
    timeout_s: float = START_TIMEOUT_S,
    build: NodeBuild | None = None,
) -> SearchNodeHandle:
    """Start a node of ``build``'s engine (default: OpenSearch) on 127.0.0.1:``port`` (0: a
    free one); return once the cluster is yellow or green. ``settings`` are node settings
    (``-E key=value``), e.g. a search thread pool's size and queue."""
    if not 0 <= port <= 65535:
        raise ConfigError(f"--port {port}: a TCP port is 0-65535 (0 picks a free one)")
    if not re.fullmatch(r"[1-9][0-9]*[kKmMgG]?", heap):
        raise ConfigError(f"--heap {heap!r}: give a size as java's -Xmx takes it, e.g. 512m or 2g")
    build = build or build_search_node()
    return start_on_port(port, lambda p: _spawn(build, p, data_dir, heap, settings or {}),
                         lambda h: _wait_until_ready(h, timeout_s), what=f"{build.engine.name} node")


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
    return SearchNodeHandle(proc, f"http://127.0.0.1:{port}", workdir, engine=build.engine,
                            data_dir=data, heap=heap)


def _wait_until_ready(handle: SearchNodeHandle, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if handle.proc.poll() is not None:
            tail = handle.log_tail(8)
            if "BindException" in tail or "address already in use" in tail.lower():
                raise PortTaken
            raise ServiceError(f"the {handle.engine.name} node exited at start (status {handle.proc.returncode}): "
                               f"{tail or 'no output'}")
        with contextlib.suppress(httpx.HTTPError, ValueError):
            health = httpx.get(f"{handle.url}/_cluster/health", timeout=2.0)
            if health.status_code == 200 and health.json().get("status") in ("yellow", "green"):
                handle.version = str(httpx.get(handle.url, timeout=2.0).json()["version"]["number"])
                return
        time.sleep(0.2)
    raise ServiceError(f"the {handle.engine.name} node at {handle.url} did not become ready within {timeout_s:.0f} s")
