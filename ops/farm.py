"""Run a farm's roles under supervisord: ``python -m qfarm.ops.farm up|status|down|ctl``.

One supervisord per farm directory runs the Procfile's roles as programs
(ops/supervisor/qfarm.conf) and starts again any that exits, with a bounded restart
rate. honcho (``honcho start``) is no supervisor: when one process exits it stops all
the others and exits itself, so one crashed worker takes the whole farm down.

Everything the config leaves open is an environment variable (``FARM_*``, listed in
``DEFAULTS``); those already set win, so a host or a test can change any of them, e.g.
``FARM_GPU_CONCURRENCY=4 python -m qfarm.ops.farm up --roles cpu,gpu``. The farm's settings
(``QFARM_REDIS_URL``, ``QFARM_LLM_ENDPOINTS``, ...) are passed to every program as they
are in this environment. systemd units for the same roles: ops/systemd/.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from qfarm.common.vocab import FARM_ROLES, WORKER_ROLES, Role

CONF = Path(__file__).resolve().parent / "supervisor" / "qfarm.conf"
# The Procfile's roles, in its order; the config has one program for each.
ROLES = FARM_ROLES
DEFAULT_ROLES = (*WORKER_ROLES, Role.API)
DEFAULTS = {
    # The Procfile's queues and concurrency.
    "FARM_CPU_QUEUES": "retrieve,verify",
    "FARM_CPU_CONCURRENCY": "2",
    "FARM_GPU_QUEUES": "generate",
    "FARM_GPU_CONCURRENCY": "16",
    "FARM_INTERACTIVE_QUEUES": "interactive",
    "FARM_INTERACTIVE_CONCURRENCY": "8",
    "FARM_API_HOST": "127.0.0.1",
    "FARM_API_PORT": "8080",
    "FARM_SIM_HOST": "127.0.0.1",
    "FARM_SIM_PORT": "8000",
    "FARM_FLOWER_PORT": "5555",
    "FARM_NODE": "%h",  # Celery's host name
    "FARM_WRAP": "",  # a command prefix, e.g. `ip netns exec ns1`
    "FARM_LOGLEVEL": "INFO",
    # Restart bounds (ops/supervisor/qfarm.conf says how they combine).
    "FARM_STARTSECS": "10",
    "FARM_STARTRETRIES": "5",
    "FARM_STOPWAITSECS": "60",
}
UP_STATES = {"RUNNING"}
FAILED_STATES = {"FATAL"}  # supervisord gave up on it; BACKOFF and EXITED are retried


def farm_env(base: Mapping[str, str], farm_dir: Path, roles: Sequence[str] = DEFAULT_ROLES) -> dict[str, str]:
    """The environment supervisord runs with: ``base``, every ``FARM_*`` default it does not
    set, the farm directory and which roles start."""
    unknown = sorted(set(roles) - set(ROLES))
    if unknown:
        raise SystemExit(f"unknown role(s) {', '.join(unknown)}; the roles are {', '.join(ROLES)}")
    env = dict(base)
    for key, value in DEFAULTS.items():
        env.setdefault(key, value)
    env.setdefault("FARM_BIN", str(Path(sys.executable).parent))
    env.setdefault("FARM_HOME", os.getcwd())
    env["FARM_DIR"] = str(farm_dir.resolve())
    for role in ROLES:
        env[f"FARM_START_{role.upper()}"] = "true" if role in roles else "false"
    return env


def _tool(name: str, env: Mapping[str, str]) -> str:
    local = Path(env["FARM_BIN"]) / name
    found = str(local) if local.exists() else shutil.which(name)
    if not found:
        raise SystemExit(f"{name} not found: pip install -e '.[farm]' (it brings supervisor)")
    return found


def ctl(env: Mapping[str, str], *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    """``supervisorctl`` on this farm's supervisord."""
    return subprocess.run([_tool("supervisorctl", env), "-c", str(CONF), *args], env=dict(env),
                          capture_output=True, text=True, check=check)  # fmt: skip


def states(env: Mapping[str, str]) -> dict[str, str]:
    """Each program's state (RUNNING, STARTING, BACKOFF, FATAL, STOPPED, ...)."""
    out = ctl(env, "status").stdout
    return {line.split()[0]: line.split()[1] for line in out.splitlines() if len(line.split()) > 1}


def _roles_file(env: Mapping[str, str]) -> Path:
    """Where ``up`` records the roles it was asked to start, for ``status`` to judge by."""
    return Path(env["FARM_DIR"]) / "roles"


def asked_roles(env: Mapping[str, str]) -> list[str] | None:
    """The roles the farm's ``up`` was asked to start (None: not recorded)."""
    try:
        text = _roles_file(env).read_text(encoding="utf-8")
    except OSError:
        return None
    return [r for r in text.strip().split(",") if r]


def up(env: Mapping[str, str], roles: Sequence[str], *, wait_s: float = 0.0,
       foreground: bool = False) -> int:  # fmt: skip
    """Start supervisord and its roles; with ``wait_s``, wait until they all run. Says what
    it started (each role's pid) and where their logs are."""
    Path(env["FARM_DIR"]).mkdir(parents=True, exist_ok=True)
    _roles_file(env).write_text(",".join(roles) + "\n", encoding="utf-8")
    cmd = [_tool("supervisord", env), "-c", str(CONF)]
    if foreground:
        os.execve(cmd[0], [*cmd, "--nodaemon"], dict(env))
    res = subprocess.run(cmd, env=dict(env), capture_output=True, text=True)
    if res.returncode != 0:  # e.g. one already runs on this farm directory
        said = [ln for ln in (res.stderr + res.stdout).splitlines() if ln.startswith("Error")]
        print(f"farm in {env['FARM_DIR']}: supervisord did not start: "
              f"{said[0] if said else f'exit status {res.returncode}'}", file=sys.stderr)
        return 1
    farm_dir = env["FARM_DIR"]
    if wait_s <= 0:
        print(f"farm in {farm_dir}: supervisord started with the roles {', '.join(roles)} (not "
              f"waited for; `{_me(env)} status` shows their state; logs {farm_dir}/<role>.log)")
        return 0
    deadline = time.monotonic() + wait_s
    seen: dict[str, str] = {}
    while time.monotonic() < deadline:
        seen = {role: state for role, state in states(env).items() if role in roles}
        if len(seen) == len(roles) and set(seen.values()) <= UP_STATES:
            pids = {role: ctl(env, "pid", role).stdout.strip() for role in roles}
            print(f"farm in {farm_dir}: started " + ", ".join(
                f"{role} (pid {pids[role]})" for role in roles)
                + f"; logs {farm_dir}/<role>.log; `{_me(env)} status` shows them, "
                  f"`{_me(env)} down` stops them")
            return 0
        if set(seen.values()) & FAILED_STATES:
            break
        time.sleep(0.5)
    failed = ", ".join(f"{role} {state}" for role, state in sorted(seen.items()) if state not in UP_STATES)
    print(f"farm in {env['FARM_DIR']}: not running after {wait_s:.0f}s: {failed or 'no status'}; "
          f"see {env['FARM_DIR']}/<role>.log", file=sys.stderr)  # fmt: skip
    return 1


def _me(env: Mapping[str, str]) -> str:
    """This launcher's command line for the farm's directory, for the lines it prints."""
    return f"python -m qfarm.ops.farm --dir {env['FARM_DIR']}"


def status(env: Mapping[str, str]) -> int:
    """Each role's state; 0 when every role ``up`` was asked for runs, else 1 (a role never
    asked for is listed as such and does not count)."""
    res = ctl(env, "status")
    sys.stderr.write(res.stderr)
    asked = asked_roles(env)
    lines = [ln for ln in res.stdout.splitlines() if ln.split()]
    if asked is None:  # a farm started by hand: the roles it started are those started
        asked = [ln.split()[0] for ln in lines if "Not started" not in ln]
    down_roles = []
    for line in lines:
        role, state = line.split()[0], (line.split() + [""])[1]
        if role in asked:
            print(line)
            if state not in UP_STATES:
                down_roles.append(f"{role} {state}")
    idle = sorted(ln.split()[0] for ln in lines if ln.split()[0] not in asked)
    if idle:
        print(f"not asked for: {', '.join(idle)}")
    if down_roles:
        print(f"not running: {', '.join(down_roles)}; see {env['FARM_DIR']}/<role>.log",
              file=sys.stderr)
        return 1
    return 0


def down(env: Mapping[str, str]) -> int:
    """Stop every role (warm shutdown) and supervisord; returns once supervisord has exited."""
    res = ctl(env, "shutdown")
    sys.stdout.write(res.stdout)
    sys.stderr.write(res.stderr)
    if res.returncode != 0:
        return res.returncode
    pidfile = Path(env["FARM_DIR"]) / "supervisord.pid"
    deadline = time.monotonic() + float(env["FARM_STOPWAITSECS"]) + 30
    while pidfile.exists() and time.monotonic() < deadline:  # supervisord removes it last
        time.sleep(0.2)
    return 0 if not pidfile.exists() else 1


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m qfarm.ops.farm", description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", type=Path, default=Path(os.environ.get("FARM_DIR", ".farm")),
                   help="supervisord's socket, pid file and the roles' logs (default .farm)")
    sub = p.add_subparsers(dest="command", required=True)
    start = sub.add_parser("up", help="start supervisord and the roles")
    start.add_argument("--roles", default=",".join(DEFAULT_ROLES),
                       help=f"comma-separated, of {', '.join(ROLES)} (default %(default)s)")
    start.add_argument("--wait", type=float, default=60.0, metavar="S",
                       help="wait up to S seconds for every role to run; 0: do not wait (default 60)")
    start.add_argument("--foreground", action="store_true",
                       help="run supervisord in the foreground (under another supervisor, a container)")
    sub.add_parser("status", help="each role's state; exit 0 when every role `up` started "
                                  "runs, 1 otherwise")
    sub.add_parser("down", help="stop the roles (warm shutdown) and supervisord")
    passthrough = sub.add_parser("ctl", help="any supervisorctl command, e.g. `ctl restart gpu`")
    passthrough.add_argument("args", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    roles = [r.strip() for r in getattr(args, "roles", ",".join(DEFAULT_ROLES)).split(",") if r.strip()]
    env = farm_env(os.environ, args.dir, roles)
    if args.command == "up":
        return up(env, roles, wait_s=args.wait, foreground=args.foreground)
    if not (Path(env["FARM_DIR"]) / "supervisor.sock").exists():
        print(f"no farm runs in {env['FARM_DIR']} (`python -m qfarm.ops.farm --dir {args.dir} up` starts one)",
              file=sys.stderr)
        return 1
    if args.command == "down":
        return down(env)
    if args.command == "status":
        return status(env)
    res = ctl(env, *args.args)
    sys.stdout.write(res.stdout)
    sys.stderr.write(res.stderr)
    return res.returncode


if __name__ == "__main__":
    sys.exit(main())
