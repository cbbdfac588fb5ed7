"""`qfarm view` refuses what it cannot serve with one clear line and a non-zero exit."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from qfarm.cli import main


def test_missing_results_dir_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["view", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "no such results directory" in err and str(tmp_path / "nope") in err


def test_busy_port_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["view", str(tmp_path), "--port", str(port)]) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("no_redis", [True, False])
def test_view_serves_without_redis_and_says_so(tmp_path: Path, unused_port: int, no_redis: bool) -> None:
    """No Redis at QFARM_REDIS_URL (or --no-redis): the runs page is served, with one note."""
    import os
    import re
    import subprocess
    import sys
    import urllib.request

    env = {k: v for k, v in os.environ.items() if not k.startswith("QFARM_")}
    env["QFARM_REDIS_URL"] = f"redis://127.0.0.1:{unused_port}/0"
    args = [sys.executable, "-m", "qfarm.cli", "view", str(tmp_path), "--port", "0"]
    proc = subprocess.Popen(args + (["--no-redis"] if no_redis else []),
                            stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        url = re.search(r"http://[\d.]+:\d+/", line)
        assert url, f"qfarm view did not start: {line!r}"
        with urllib.request.urlopen(url.group(0), timeout=30) as resp:
            assert resp.status == 200
            html = resp.read().decode()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    note = re.search(r'<p class="note" id="redis-note">(.*?)</p>', html)
    assert note, "the page names the missing Redis in one line"
    if no_redis:
        assert "No Redis configured" in note.group(1)
    else:
        assert f"127.0.0.1:{unused_port}" in note.group(1) and "not reachable" in note.group(1)


VIEW_TOKEN = "view-token-0123456789abcdef"


def _start_view(tmp_path: Path, *args: str, **env_extra: str):
    import os
    import re
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("QFARM_")} | env_extra
    cmd = [sys.executable, "-m", "qfarm.cli", "view", str(tmp_path), "--port", "0", "--no-redis",
           *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline() if proc.stdout else ""
    match = re.search(r":(\d+)/", line)
    return proc, (int(match.group(1)) if match else None), line


def test_a_non_loopback_address_without_tokens_is_refused(tmp_path: Path) -> None:
    proc, port, line = _start_view(tmp_path, "--host", "0.0.0.0")
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill() if proc.poll() is None else None
    assert port is None, f"qfarm view served every run on 0.0.0.0 with no login: {line!r}"
    assert proc.returncode == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "refusing to listen on 0.0.0.0 with no QFARM_API_TOKENS" in lines[0]


@pytest.mark.slow
def test_with_tokens_the_pages_need_one_and_a_login_stays_on_this_site(tmp_path: Path) -> None:
    import http.client

    proc, port, line = _start_view(tmp_path, "--host", "0.0.0.0", QFARM_API_TOKENS=VIEW_TOKEN)
    assert port, f"qfarm view did not start: {line!r}"

    def get(path: str, headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        resp.read()
        return resp

    try:
        assert get("/").status == 401
        assert get("/?token=wrong-token-0123456789").status == 401
        login = get(f"//evil.example/?token={VIEW_TOKEN}&a=1")
        assert login.status == 303
        assert login.getheader("Location") == "/evil.example/?a=1"
        cookie = login.getheader("Set-Cookie").split(";")[0]
        assert get("/", {"Cookie": cookie}).status == 200
        assert get("/", {"Authorization": f"Bearer {VIEW_TOKEN}"}).status == 200
    finally:
        proc.terminate()
        proc.wait(timeout=10)
