"""`qfarm search-server`: a real OpenSearch node in the foreground until Ctrl-C, its data kept."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from qfarm.cli import main

REPO = Path(__file__).resolve().parents[2]
QFARM = str(Path(sys.executable).parent / "qfarm")


@pytest.mark.parametrize(("args", "says"), [
    (["--port", "70000"], "--port 70000: a TCP port is 0-65535"),
    (["--heap", "lots"], "--heap 'lots': give a size as java's -Xmx takes it"),
])  # fmt: skip
def test_bad_arguments_are_one_line_and_exit_2(args, says, capsys) -> None:
    assert main(["search-server", *args]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1


@pytest.mark.slow
def test_search_server_serves_in_the_foreground_until_ctrl_c(search_node_build, tmp_path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QFARM_")}
    data = tmp_path / "node"
    proc = subprocess.Popen([QFARM, "search-server", "--port", "0", "--data", str(data)], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line.strip())
            if "Ctrl-C stops it" in line:
                break
        assert lines[0].startswith("serving OpenSearch 2.19"), lines
        exports = dict(x.removeprefix("export ").split("=", 1) for x in lines if x.startswith("export "))
        assert exports["QFARM_RETRIEVER"] == "opensearch"
        url = exports["QFARM_ES_URL"]
        info = httpx.get(url, timeout=10).json()
        assert info["version"]["distribution"] == "opensearch"
        httpx.put(f"{url}/kept", timeout=30).raise_for_status()
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole group
        assert proc.wait(timeout=60) == 130
        with pytest.raises(httpx.ConnectError):  # the node went with it
            httpx.get(url, timeout=5)
        assert any(data.rglob("*")), "the node's data directory is kept"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
