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
