"""`qfarm sim`: the command starts a server and rejects bad options with a clear message."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import httpx
import pytest

from qfarm.cli import main


@pytest.mark.slow
def test_qfarm_sim_serves_until_terminated() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "qfarm", "sim", "--port", "0", "--latency", "zero"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        banner = proc.stdout.readline()  # printed once the port is bound
        assert "SIMULATOR" in banner and "simulated" in banner
        url = re.search(r"http://127\.0\.0\.1:\d+", banner)[0]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        reply = httpx.post(
            f"{url}/v1/completions", json={"prompt": "hi", "max_tokens": 8}, timeout=5
        )
        assert reply.status_code == 200 and reply.headers["x-qfarm-simulator"] == "1"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert proc.returncode == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--fault-rate", "429=2"], "--fault-rate"),
        (["--fault-rate", "teapot=0.1"], "unknown fault kind"),
        (["--rate", "denial=x"], "is not a number"),
        (["--ttft-ms", "120-60"], "--ttft-ms"),
        (["--max-num-seqs", "0"], "at least 1"),
    ],
)
def test_bad_options_are_one_line_errors(argv: list[str], message: str, capsys) -> None:
    assert main(["sim", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("qfarm: error: qfarm sim:") and message in err and err.count("\n") == 1
