"""``python -m qfarm.ops.sim --port N [options]``: run the vLLM simulator in the foreground."""

from __future__ import annotations

import argparse
import sys

from qfarm.ops.sim.config import add_sim_arguments, config_from_args
from qfarm.ops.sim.server import run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m qfarm.ops.sim",
        description="vLLM-compatible simulator: answers are SIMULATED from the prompt's evidence.",
    )
    add_sim_arguments(parser)
    args = parser.parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
