"""Entry point of the ``qfarm`` command.

Each subcommand lives in ``qfarm/commands/<name>.py`` and exposes
``register(subparsers)``, which adds its parser and sets ``func``. A
``QfarmError`` becomes a one-line ``qfarm: error: ...`` and its exit code.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from qfarm.common.errors import QfarmError
from qfarm.producer import interrupts

COMMANDS = (
    "sweep",
    "sets",
    "ask",
    "index",
    "search",
    "sim",
    "local-model",
    "report",
    "compare",
    "status",
    "cancel",
    "policy",
    "view",
    "serve",
    "eval-retrieval",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="qfarm", description="Distributed bench-sweep and query farm for grounded QA."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        module = importlib.import_module(f"qfarm.commands.{name.replace('-', '_')}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    interrupts.install()
    try:
        # Inside the try: a flag's type (e.g. --out) may raise an InputError of its own.
        args = parser.parse_args(argv)
        return int(args.func(args) or 0)
    except QfarmError as exc:
        print(f"qfarm: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("qfarm: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`qfarm search ... | head`): stop quietly, as Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
