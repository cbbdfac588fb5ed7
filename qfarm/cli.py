"""Entry point of the ``qfarm`` command.

Each subcommand lives in ``qfarm/commands/<name>.py`` and exposes
``register(subparsers)``, which adds its parser and sets ``func``. A
``QfarmError`` becomes a one-line ``qfarm: error: ...`` and its exit code.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import logging
import os
import sys
from typing import Any

from qfarm.common.errors import QfarmError
from qfarm.common.settings import LOG_LEVELS
from qfarm.common.vocab import ExitCode
from qfarm.producer import interrupts

COMMANDS = (
    "sweep",
    "sets",
    "ask",
    "index",
    "search",
    "sim",
    "local-model",
    "search-server",
    "report",
    "compare",
    "export",
    "verify",
    "status",
    "doctor",
    "cancel",
    "cache",
    "policy",
    "view",
    "serve",
    "eval-retrieval",
)


LOG_LEVEL_HELP = ("log level: critical, error, warning, info or debug (default QFARM_LOG_LEVEL, "
                  "else warning, info for `qfarm sim`; error with --quiet). "
                  "QFARM_LOG_FORMAT=json: one JSON object per line")


EXIT_CODES_HELP = "Exit codes: " + ", ".join(f"{code:d} {what}" for code, what in (
    (ExitCode.OK, "success"),
    (ExitCode.FAILED, "a run incomplete or failed (or a service error)"),
    (ExitCode.USAGE, "bad input or settings"),
    (ExitCode.ROW_ERRORS, "a run completed with errored rows beyond --max-error-rate"),
    (ExitCode.WORSE, "`compare --fail-on-worse` found B worse"),
    (ExitCode.INTERRUPTED, "interrupted"),
)) + "."


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="qfarm", description="Distributed bench-sweep and query farm for grounded QA.",
        epilog=EXIT_CODES_HELP,
    )
    parser.add_argument("--version", action=_Version, nargs=0,
                        help="print qfarm's version and its rule versions, and exit")
    parser.add_argument("--log-level", type=str.lower, choices=LOG_LEVELS, default=None,
                        help=LOG_LEVEL_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        module = importlib.import_module(f"qfarm.commands.{name.replace('-', '_')}")
        module.register(sub)
    # Every command takes --log-level after its name too (`qfarm sweep ... --log-level debug`);
    # SUPPRESS keeps a command's silence from hiding the one given before it.
    for command in sub.choices.values():
        if not any("--log-level" in a.option_strings for a in command._actions):
            command.add_argument("--log-level", type=str.lower, choices=LOG_LEVELS,
                                 default=argparse.SUPPRESS, help=LOG_LEVEL_HELP)
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


def setup_logging(args: argparse.Namespace) -> None:
    """Configure this process's logging once (qfarm.common.logs): the level from --log-level,
    else QFARM_LOG_LEVEL, else warning (error with --quiet); QFARM_LOG_FORMAT's format;
    every secret the settings hold redacted."""
    from qfarm.common import logs
    from qfarm.common.settings import load_settings

    try:
        settings = load_settings()
    except QfarmError:
        settings = None  # the command reports the bad variable itself
    # The simulator's start-up line is an info line, and a foreground server should say it.
    default = ("error" if getattr(args, "quiet", False) else
               "info" if args.command == "sim" else "warning")
    level = getattr(args, "log_level", None) or (settings and settings.log_level) or default
    logs.set_role("api" if args.command == "serve" else
                  "simulator" if args.command == "sim" else "cli")
    fmt = settings.log_format if settings else "text"
    secrets = settings.secrets() if settings else []
    handler = logs.log_handler(_Stderr(), fmt=fmt, secrets=secrets)
    logs.install(handler, level)
    if fmt == "json":
        # Every line on stderr one JSON object: no progress bar (it redraws one line), and
        # what a command prints there for people becomes a log line too.
        if hasattr(args, "quiet"):
            args.quiet = True
        real = sys.stderr.stream if isinstance(sys.stderr, _LinesToLog) else sys.stderr
        sys.stderr = _LinesToLog(handler, real)  # type: ignore[assignment]


class _Stderr:
    """The stream of the log handler: whatever ``sys.stderr`` is at each write, not the
    object it was when the handler was made. ``main`` may run more than once in one
    process (the tests, notebooks), and a handler bound to a stream that was replaced
    and closed since fails on every later line."""

    def write(self, text: str) -> int:
        return int(self._stream().write(text))

    def flush(self) -> None:
        self._stream().flush()

    @staticmethod
    def _stream() -> Any:
        err: Any = sys.stderr
        # JSON mode: the handler feeds _LinesToLog, so it writes to the stream beneath.
        return err.stream if isinstance(err, _LinesToLog) else err


class _LinesToLog:
    """stderr in JSON-log mode: each line printed becomes one record of ``handler``
    (``qfarm: error: ...`` at error level, the rest at info), so the stream holds JSON
    objects only."""

    def __init__(self, handler: logging.Handler, stream: object) -> None:
        self.handler = handler
        self.stream = stream  # the real stderr, for what is not a line of text (fileno...)
        self.pending = ""

    def write(self, text: str) -> int:
        self.pending += text
        *lines, self.pending = self.pending.replace("\r", "\n").split("\n")
        for line in lines:
            if line.strip():
                level = logging.ERROR if line.startswith("qfarm: error") else logging.INFO
                self.handler.handle(logging.LogRecord("qfarm.cli", level, "", 0, line.strip(),
                                                      None, None))
        return len(text)

    def flush(self) -> None:
        self.handler.flush()

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name: str) -> object:
        return getattr(self.stream, name)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    interrupts.install()
    try:
        # Inside the try: a flag's type (e.g. --out) may raise an InputError of its own.
        args = parser.parse_args(argv)
        setup_logging(args)
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
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        # Any command that writes (report, compare, index): one line, not a traceback.
        where = f" writing {exc.filename}" if exc.filename else ""
        print(f"qfarm: error: no space left on device{where} ({exc.strerror}); free some space "
              "and run the command again", file=sys.stderr)
        return int(ExitCode.FAILED)


if __name__ == "__main__":
    sys.exit(main())
