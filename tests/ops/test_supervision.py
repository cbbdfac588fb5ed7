"""Supervision files (ops/supervisor/qfarm.conf, ops/systemd/) against the Procfile: the same
roles and, with their defaults, the same commands; the launcher's environment
(ops/farm.py). The supervised farm itself runs in tests/faults/test_supervised_farm.py."""

from __future__ import annotations

import configparser
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from qfarm.ops import farm

REPO = Path(__file__).resolve().parents[2]
SYSTEMD = REPO / "ops" / "systemd"


def procfile() -> dict[str, str]:
    roles = {}
    for line in (REPO / "Procfile").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            role, command = line.split(":", 1)
            roles[role.strip()] = command.strip()
    return roles


def normalised(command: str) -> str:
    """A command as the Procfile spells it: programs by name, no log level, Celery's %h."""
    words = shlex.split(command)
    words = [Path(w).name if w.startswith("/") else w for w in words]
    if "--loglevel" in words:
        i = words.index("--loglevel")
        del words[i:i + 2]
    return " ".join(words)


def supervisor_commands() -> dict[str, str]:
    parser = configparser.RawConfigParser()
    parser.read(farm.CONF)
    env = farm.farm_env({}, Path("/farm"), farm.ROLES)
    env["FARM_BIN"] = "/venv/bin"
    out = {}
    for section in parser.sections():
        if section.startswith("program:"):
            command = re.sub(r"%\(ENV_(\w+)\)s", lambda m: env[m.group(1)], parser.get(section, "command"))
            out[section.split(":", 1)[1]] = normalised(command)
    return out


def systemd_commands() -> dict[str, str]:
    out = {}
    for unit in sorted(SYSTEMD.glob("qfarm-*.service")):
        text = unit.read_text()
        env = dict(kv.split("=", 1) for line in re.findall(r"^Environment=(.*)$", text, re.M)
                   for kv in line.split())  # fmt: skip
        env["FARM_NODE"] = "%h"  # the unit's %H: this host's name, as Celery's %h
        (exec_start,) = re.findall(r"^ExecStart=(.*)$", text, re.M)
        assert exec_start.startswith("/usr/bin/env $FARM_WRAP "), exec_start
        command = exec_start.removeprefix("/usr/bin/env $FARM_WRAP ")
        command = re.sub(r"\$\{(\w+)\}", lambda m, env=env: env[m.group(1)], command)
        out[unit.stem.removeprefix("qfarm-")] = normalised(command)
    return out


def test_supervisord_runs_each_procfile_role_with_its_command():
    assert supervisor_commands() == {role: normalised(cmd) for role, cmd in procfile().items()}
    assert set(farm.ROLES) == set(procfile())


def test_systemd_has_a_unit_for_each_procfile_role_with_its_command():
    assert systemd_commands() == {role: normalised(cmd) for role, cmd in procfile().items()}


def test_every_restart_is_bounded():
    parser = configparser.RawConfigParser()
    parser.read(farm.CONF)
    for section in (s for s in parser.sections() if s.startswith("program:")):
        options = dict(parser.items(section))
        assert options["autorestart"] == "true"
        assert options["startretries"] == "%(ENV_FARM_STARTRETRIES)s", section
        assert options["startsecs"] == "%(ENV_FARM_STARTSECS)s", section
    assert int(farm.DEFAULTS["FARM_STARTSECS"]) > 0 and int(farm.DEFAULTS["FARM_STARTRETRIES"]) > 0
    for unit in SYSTEMD.glob("qfarm-*.service"):
        text = unit.read_text()
        assert "Restart=always" in text and "StartLimitBurst=" in text and "StartLimitIntervalSec=" in text


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze is not installed")
def test_systemd_accepts_the_units():
    units = [str(p) for p in sorted(SYSTEMD.glob("qfarm*"))]
    res = subprocess.run(["systemd-analyze", "verify", *units], capture_output=True, text=True)
    # Keys of newer systemd versions than this host's are ignored there, by design.
    problems = [line for line in (res.stdout + res.stderr).splitlines()
                if line.strip() and not re.search(r"Unknown key '(RestartSteps|RestartMaxDelaySec)'", line)]
    assert not problems, problems


def test_the_launcher_fills_in_only_what_is_not_set():
    env = farm.farm_env({"FARM_GPU_CONCURRENCY": "4", "QFARM_REDIS_URL": "redis://r:6379/0"},
                        Path("/tmp/f"), ("cpu", "gpu"))  # fmt: skip
    assert env["FARM_GPU_CONCURRENCY"] == "4" and env["FARM_CPU_CONCURRENCY"] == "2"
    assert env["QFARM_REDIS_URL"] == "redis://r:6379/0"
    assert env["FARM_START_GPU"] == "true" and env["FARM_START_API"] == "false"
    assert env["FARM_DIR"] == "/tmp/f"


def test_the_launcher_refuses_an_unknown_role():
    with pytest.raises(SystemExit, match="unknown role.*gpus.*the roles are simulator, cpu"):
        farm.farm_env({}, Path("/tmp/f"), ("cpu", "gpus"))


@pytest.mark.slow
def test_up_says_what_it_started_and_status_judges_only_the_roles_asked_for(tmp_path, unused_port):
    import os
    import sys

    if shutil.which("supervisord", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("supervisor is not installed (pip install -e '.[farm]')")
    env = {**os.environ, "FARM_SIM_PORT": str(unused_port), "FARM_STARTSECS": "1",
           "FARM_HOME": str(REPO)}
    farm_dir = tmp_path / "farm"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "qfarm.ops.farm", "--dir", str(farm_dir), *args],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=120)

    try:
        res = run("up", "--roles", "simulator", "--wait", "60")
        assert res.returncode == 0, res.stdout + res.stderr
        assert res.stdout.startswith(f"farm in {farm_dir}: started simulator (pid ")
        res = run("status")  # the other roles were never asked for: no failure for them
        assert res.returncode == 0, res.stdout + res.stderr
        assert "simulator" in res.stdout and "RUNNING" in res.stdout
        assert "not asked for: api, cpu, flower, gpu, interactive" in res.stdout
        run("ctl", "stop", "simulator")
        res = run("status")  # a role asked for that does not run is a failure
        assert res.returncode == 1 and "not running: simulator STOPPED" in res.stderr
    finally:
        run("down")
