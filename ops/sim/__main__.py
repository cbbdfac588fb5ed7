"""``python -m qfarm.ops.sim --port N [options]``: run the vLLM simulator in the foreground."""

from __future__ import annotations

import argparse
import os
import sys

from qfarm.ops.sim.config import add_sim_arguments, config_from_args
from qfarm.ops.sim.server import run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m qfarm.ops.sim",
        description="vLLM-compatible simulator: answers are SIMULATED from the prompt's evidence.",
    )
    add_sim_arguments(parser)
    parser.add_argument("--log-level", type=str.lower, default=None,
                        choices=("critical", "error", "warning", "info", "debug"),
                        help="log level (default QFARM_LOG_LEVEL, else info); "
                             "QFARM_LOG_FORMAT=json for JSON lines")
    args = parser.parse_args(argv)
    _setup_logging(args.log_level, args.api_key)
    try:
        config = config_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        run(config)
    except OSError as exc:
        print(
            f"qfarm simulator: cannot listen on {config.host}:{config.port}: {exc}", file=sys.stderr
        )
        return 1
    return 0


def _setup_logging(level: str | None, api_key: str | None) -> None:
    """The simulator's logging, configured once (qfarm.common.logs), like every qfarm process."""
    from qfarm.common import logs
    from qfarm.common.errors import ConfigError
    from qfarm.common.settings import load_settings

    try:
        settings = load_settings()
        fmt, secrets, level = settings.log_format, settings.secrets(), level or settings.log_level
    except ConfigError:
        fmt, secrets = "text", []
    logs.set_role("simulator")
    # Its own API key (QFARM_SIM_API_KEY, or --api-key) is a secret like the farm's.
    sim_keys = [api_key or "", os.environ.get("QFARM_SIM_API_KEY") or ""]
    logs.install(logs.log_handler(sys.stderr, fmt=fmt, secrets=[*secrets, *sim_keys]),
                 level or "info")


if __name__ == "__main__":
    sys.exit(main())
