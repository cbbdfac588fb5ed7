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
    "verify",
    "status",
    "cancel",
    "policy",
    "view",
    "serve",
    "eval-retrieval",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="qfarm", description="Distributed bench-sweep and query farm for grounded QA.",
        epilog="Exit codes: 0 success, 1 a run incomplete or failed (or a service error), "
               "2 bad input or settings, 3 a run completed with errored rows beyond "
               "--max-error-rate, 4 `compare --fail-on-worse` found B worse, 130 interrupted.",
    )
    parser.add_argument("--version", action=_Version, nargs=0,
                        help="print qfarm's version and its rule versions, and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        module = importlib.import_module(f"qfarm.commands.{name.replace('-', '_')}")
        module.register(sub)
    return parser


class _Version(argparse.Action):
    """argparse's own version action wraps the line at the terminal's width; scripts read
    it whole."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        print(version_line())
        parser.exit()


def version_line() -> str:
    """``qfarm --version``: the installed distribution's version, and the versions of the
    rules rows depend on (they fold into the governance hash)."""
    from importlib.metadata import PackageNotFoundError, version

    from qfarm.common import versions

    try:
        dist = version("qfarm")
    except PackageNotFoundError:
        dist = "(not installed: running from a source tree)"
    return (f"qfarm {dist} ({versions.VERIFIER_VERSION}, {versions.PROMPT_VERSION}, "
            f"{versions.CLASSIFIER_VERSION}, {versions.CHUNKER_VERSION}; row schema "
            f"{versions.ROW_SCHEMA_VERSION}; Python {sys.version.split()[0]})")


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
