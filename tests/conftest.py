"""Suite-wide fixtures only; the rest live beside the tests that use them."""

from __future__ import annotations

import importlib
import os
import socket

import pytest


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never see the developer's QFARM_* variables (httpx's clean_environ)."""
    for key in list(os.environ):
        if key.startswith("QFARM_") and key != "QFARM_DATA_DIR":
            monkeypatch.delenv(key, raising=False)


@pytest.fixture
def unused_port() -> int:
    """A loopback port nothing listens on (a fixed one may be some other test's server)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def default_index(tmp_path_factory: pytest.TempPathFactory):
    """The embedded index of the real default corpus, built once per test session."""
    from qfarm.common.settings import Settings
    from qfarm.worker.retrieval import ensure_default_index

    data_dir = tmp_path_factory.mktemp("qfarm-data")
    settings = Settings(data_dir=data_dir)
    return ensure_default_index(settings, progress=False)


@pytest.fixture
def own_redis(tmp_path_factory: pytest.TempPathFactory):
    """Start a private ``redis-server`` (extra arguments appended); returns a URL for it.

    For tests that configure or restart Redis: the shared test server is left alone.
    """
    import socket
    import subprocess
    import time

    import redis

    servers: list[subprocess.Popen] = []

    def start(*args: str, password: str | None = None) -> str:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        work = tmp_path_factory.mktemp("redis")
        servers.append(subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(work), *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ))
        url = f"redis://127.0.0.1:{port}/0" + (f"?password={password}" if password else "")
        client, deadline = redis.Redis.from_url(url), time.monotonic() + 10
        while True:
            try:
                client.ping()
                return url
            except redis.ConnectionError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)

    yield start
    for server in servers:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture(scope="session")
def local_install() -> None:
    """The local model's server and model file are installed (`make install-local`).

    Skips, with the reason in one line, where they are not; with QFARM_REQUIRE_LOCAL=1
    (`make test` sets it, after installing them) a missing install fails instead.
    """
    from qfarm.common.errors import ConfigError
    from qfarm.ops.local.launch import find_model_file, server_version

    try:
        server_version()
        find_model_file()
    except ConfigError as exc:
        if os.environ.get("QFARM_REQUIRE_LOCAL") == "1":
            pytest.fail(f"QFARM_REQUIRE_LOCAL=1 but {exc}")
        pytest.skip(f"no local model: {exc}")


@pytest.fixture(scope="session")
def export_extra():
    """Import a library of the exports' extras (`make install-test` installs them):
    ``export_extra("pyarrow")``. Skips where it is missing (a base install); with
    QFARM_REQUIRE_EXPORTS=1 (`make test` sets it) a missing one fails instead."""
    def need(module: str):
        try:
            return importlib.import_module(module)
        except ImportError as exc:
            if os.environ.get("QFARM_REQUIRE_EXPORTS") == "1":
                pytest.fail(f"QFARM_REQUIRE_EXPORTS=1 but {module} is not installed ({exc}); "
                            "run `make install-test`")
            pytest.skip(f"{module} is not installed (`make install-test` installs it)")

    return need


@pytest.fixture(scope="session")
def local_model(local_install):
    """llama.cpp's server on the local CPU model, started once per session (slow tests)."""
    from qfarm.ops.local.launch import start_local_model

    with start_local_model() as handle:
        yield handle


def _node_build(engine: str, *, min_java: int = 17):
    """A search node's launcher, built (``qfarm.ops.search.launch``) on a JDK of at least
    ``min_java``. Skips where Java or Maven is missing; with QFARM_REQUIRE_SEARCH_NODE=1
    (`make test` sets it, after building the nodes) a missing one fails instead."""
    from qfarm.common.errors import ConfigError
    from qfarm.ops.search.launch import build_search_node, find_jdk

    try:
        home = find_jdk(min_java) if min_java > 17 else None
        if min_java > 17 and home is None:
            raise ConfigError(f"no Java {min_java}+ JDK on this machine (JAVA_HOME, PATH, /usr/lib/jvm)")
        return build_search_node(engine, java_home=home, announce=False)
    except ConfigError as exc:
        if os.environ.get("QFARM_REQUIRE_SEARCH_NODE") == "1":
            pytest.fail(f"QFARM_REQUIRE_SEARCH_NODE=1 but {exc}")
        pytest.skip(f"no {engine} node: {exc}")


@pytest.fixture(scope="session")
def search_node_build():
    """The OpenSearch node's launcher, for tests that start nodes of their own."""
    return _node_build("opensearch")


@pytest.fixture(scope="session")
def search_node(search_node_build):
    """A real OpenSearch node, started once per session on a free port and a temporary
    directory, and stopped at its end."""
    from qfarm.ops.search.launch import start_search_node

    with start_search_node(build=search_node_build) as node:
        yield node


@pytest.fixture(scope="session")
def es8_node():
    """A real Elasticsearch 8.19 node (the default JDK, 17), once per session."""
    from qfarm.ops.search.launch import start_search_node

    with start_search_node(build=_node_build("elasticsearch")) as node:
        yield node


@pytest.fixture(scope="session")
def es9_node():
    """A real Elasticsearch 9 node (it needs a Java 21+ JDK), once per session."""
    from qfarm.ops.search.launch import start_search_node

    with start_search_node(build=_node_build("elasticsearch", min_java=21)) as node:
        yield node
