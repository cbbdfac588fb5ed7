"""Flower sees the farm: the Procfile's monitoring line, run against a real worker and sweep."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent

pytestmark = pytest.mark.slow


def procfile() -> dict[str, str]:
    lines = (REPO / "Procfile").read_text().splitlines()
    return dict(
        (name.strip(), cmd.strip())
        for name, _, cmd in (ln.partition(":") for ln in lines if ln.strip() and not ln.startswith("#"))
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_procfile_names_every_role_with_commands_that_exist():
    roles = procfile()
    assert {"simulator", "cpu", "gpu", "interactive", "flower"} <= set(roles)
    for cmd in roles.values():
        assert (VENV_BIN / shlex.split(cmd)[0]).exists(), cmd


def test_the_procfile_flower_line_listens_on_loopback_only(tmp_path):
    # Flower shows every task and question without a login: nothing but this host may reach it.
    port = free_port()
    argv = shlex.split(procfile()["flower"]) + [f"--port={port}"]  # only the port is ours
    redis_port = os.environ.get("QFARM_TEST_REDIS_PORT", "6379")
    env = {k: v for k, v in os.environ.items() if not k.startswith("QFARM_")}
    env["QFARM_REDIS_URL"] = f"redis://127.0.0.1:{redis_port}/9"
    log = tmp_path / "flower.log"
    flower = subprocess.Popen(
        [str(VENV_BIN / argv[0]), *argv[1:]], cwd=REPO, env=env, stdout=log.open("wb"),
        stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not listening_addresses(flower.pid) and time.monotonic() < deadline:
            assert flower.poll() is None, log.read_text()
            time.sleep(0.2)
        time.sleep(0.5)  # a second (IPv6) socket would be bound right after the first
        assert listening_addresses(flower.pid) == {("127.0.0.1", port)}, log.read_text()
    finally:
        os.killpg(flower.pid, signal.SIGTERM)
        flower.wait(timeout=15)


def listening_addresses(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket the process listens on, read from /proc."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = set()
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # 0A: LISTEN
                hex_addr, hex_port = local.split(":")
                raw = bytes.fromhex(hex_addr)
                # /proc prints the address as 32-bit words in host (little-endian) order.
                raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
                found.add((socket.inet_ntop(family, raw), int(hex_port, 16)))
    return found


def test_flower_shows_the_farm_tasks_with_task_events_on(farm, tmp_path):
    farm.env["QFARM_TASK_EVENTS"] = "true"
    port = free_port()
    argv = shlex.split(procfile()["flower"]) + [f"--port={port}"]
    log = (tmp_path / "flower.log").open("wb")
    flower = subprocess.Popen(
        [str(VENV_BIN / argv[0]), *argv[1:]], cwd=REPO, env=farm.env | {"FLOWER_UNAUTHENTICATED_API": "true"},
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        api = f"http://127.0.0.1:{port}/api/tasks"
        assert farm.wait_for(lambda: _get(api) is not None, timeout_s=30), (tmp_path / "flower.log").read_text()
        farm.start_worker("w1", queues="retrieve,generate,verify", concurrency=4)
        qfile = tmp_path / "q.txt"
        qfile.write_text("Who were the members of the Beatles?\nWhat is photosynthesis?\n")
        res = farm.qfarm("sweep", str(qfile), "-n", "1", "--modes", "quote", "--quiet")
        assert res.returncode == 0, res.stderr
        run_id = re.search(r"run (\S+?):", res.stderr).group(1)

        def stages_seen() -> set[str]:
            tasks = _get(api) or {}
            return {t["name"] for t in tasks.values() if t.get("state") == "SUCCESS"}

        assert farm.wait_for(
            lambda: {"qfarm.retrieve", "qfarm.generate", "qfarm.verify"} <= stages_seen(), timeout_s=30
        ), stages_seen()
        tasks = _get(api) or {}
        assert any(run_id in (t.get("args") or "") for t in tasks.values())  # argsrepr names the run
    finally:
        os.killpg(flower.pid, signal.SIGTERM)
        flower.wait(timeout=15)


def _get(url: str) -> dict | None:
    try:
        resp = httpx.get(url, timeout=2.0)
    except httpx.HTTPError:
        time.sleep(0.2)
        return None
    return resp.json() if resp.status_code == 200 else None
