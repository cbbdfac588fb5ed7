"""Log lines an operator can read: text, or one JSON object per line, secrets redacted.

Pure: formatters and a filter, no handlers. Each entry point (the ``qfarm`` command,
a Celery worker through its ``setup_logging`` signal, ``qfarm serve``, the simulator)
builds one handler with ``log_handler`` once at start and installs it on the root
logger; every library's logger (Celery's, uvicorn's, ours) propagates to it, so each
line is written once. docs/architecture.md, 'Logs'.

A line carries the time, the level, the process role (``cli``, ``api``, a worker's
role, ``simulator``), the logger, the run id, the job id or bundle, the endpoint and
the message. Those fields come from the record's ``extra`` (``log.warning(...,
extra=job_fields(...))``) or, failing that, from ``log_context`` around the code that
handles one run's bundle.

Secrets never leave: the handler's formatter replaces every secret the process knows
(``Settings.secrets()``: API keys, API tokens, Redis and search passwords) and any
password in a URL with ``***``, in the message, the arguments and the traceback.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

FIELDS = ("run_id", "job_id", "bundle", "endpoint", "error_kind")
REDACTED = "***"
# A password in a URL's userinfo (scheme://user:PASSWORD@host) or query (?password=...).
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:)[^\s@/]+@")
_QUERY_PASSWORD = re.compile(r"(?i)(?P<head>[?&]password=)[^&\s]+")

# Libraries whose debug (or, for httpx, info) lines are per request or per font: held at
# warning, so --log-level debug shows qfarm's own detail rather than thousands of theirs.
CHATTY = ("matplotlib", "PIL", "httpcore", "httpx", "asyncio", "urllib3")
# The search clients log each failed request, with its traceback, before the farm turns
# the failure into one error of its own that says what failed and how to fix it: their
# lines stay out of a terminal unless --log-level debug asks for them.
SEARCH_CLIENTS = ("opensearch", "elasticsearch", "elastic_transport")

_role = "qfarm"
_process_fields: dict[str, str] = {}
_context: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "qfarm_log_context", default=None
)


def set_role(role: str) -> None:
    """The process's role, written on each of its lines (a worker learns its own late)."""
    global _role
    _role = role


def role() -> str:
    return _role


@contextlib.contextmanager
def log_context(**fields: object) -> Iterator[None]:
    """Lines logged inside carry these fields (run_id, bundle, endpoint...) unless the
    record's ``extra`` names its own."""
    current = dict(_context.get() or {})
    current.update({k: str(v) for k, v in fields.items() if v is not None})
    token = _context.set(current)
    try:
        yield
    finally:
        _context.reset(token)


def job_fields(run_id: str | None = None, job_id: str | None = None,
               endpoint: str | None = None, error_kind: object = None) -> dict[str, str]:
    """``extra=`` for a line about one job."""
    fields = {"run_id": run_id, "job_id": job_id, "endpoint": endpoint,
              "error_kind": getattr(error_kind, "value", error_kind)}
    return {k: str(v) for k, v in fields.items() if v is not None}


class Redactor:
    """Replaces known secrets, and passwords inside URLs, with ``***``."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # Longest first: a secret that contains another is replaced whole. Three characters
        # or fewer would blot out ordinary words; no real key or password is that short.
        self.secrets = sorted({s for s in secrets if s and len(s) > 3}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        text = _URL_PASSWORD.sub(lambda m: m.group("head") + REDACTED + "@", text)
        return _QUERY_PASSWORD.sub(lambda m: m.group("head") + REDACTED, text)


def set_process_fields(**fields: object) -> None:
    """Fields every line of this process carries unless the record or ``log_context``
    names its own: a ``qfarm sweep`` process runs one run, so from its start on each line
    (its threads' and its gateway's too) names the run."""
    _process_fields.update({k: str(v) for k, v in fields.items() if v is not None})


def _fields(record: logging.LogRecord) -> dict[str, str]:
    ctx = {**_process_fields, **(_context.get() or {})}
    out = {}
    for name in FIELDS:
        value = getattr(record, name, None)
        if value is None:
            value = ctx.get(name)
        if value is not None:
            out[name] = str(value)
    return out


class _Base(logging.Formatter):
    def __init__(self, redact: Redactor) -> None:
        super().__init__()
        self.redact = redact

    def _message_and_trace(self, record: logging.LogRecord) -> tuple[str, str | None]:
        message = self.redact(record.getMessage())
        trace = None
        if record.exc_info:
            trace = self.redact(self.formatException(record.exc_info))
        elif record.exc_text:
            trace = self.redact(record.exc_text)
        if record.stack_info:
            trace = (trace + "\n" if trace else "") + self.redact(self.formatStack(record.stack_info))
        return message, trace


class TextFormatter(_Base):
    """``2026-12-01T17:50:01.123Z WARNING cli qfarm.llm [run=… job=… endpoint=…] message``."""

    def format(self, record: logging.LogRecord) -> str:
        message, trace = self._message_and_trace(record)
        when = datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
        fields = " ".join(f"{k.removesuffix('_id')}={v}" for k, v in _fields(record).items())
        line = (f"{when}Z {record.levelname} {_role} {record.name}"
                + (f" [{self.redact(fields)}]" if fields else "") + f" {message}")
        return line + ("\n" + trace if trace else "")


class JsonFormatter(_Base):
    """One JSON object per line: time, level, role, logger, the job's fields, message
    (and ``exc``, the traceback, when there is one). Never more than one line."""

    def format(self, record: logging.LogRecord) -> str:
        message, trace = self._message_and_trace(record)
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "role": _role,
            "logger": record.name,
        }
        out.update({k: self.redact(v) for k, v in _fields(record).items()})
        out["message"] = message
        if trace:
            out["exc"] = trace
        # json.dumps escapes newlines: a traceback stays on its one line.
        return self.redact(json.dumps(out, ensure_ascii=False, default=str))


def log_handler(stream: Any, *, fmt: str = "text", secrets: Iterable[str] = ()) -> logging.Handler:
    """The one handler of a process: ``fmt`` is ``text`` or ``json``; ``secrets`` are
    redacted from every line. The entry point installs it (``install``)."""
    handler = logging.StreamHandler(stream)
    redact = Redactor(secrets)
    handler.setFormatter(JsonFormatter(redact) if fmt == "json" else TextFormatter(redact))
    return handler


def install(handler: logging.Handler, level: str) -> None:
    """Make ``handler`` the root logger's only one, at ``level``; libraries' own handlers
    (set up before, e.g. by uvicorn) are removed so no line is written twice."""
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.captureWarnings(True)  # warnings.warn lines go through the handler too
    for name in CHATTY:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
    clients = logging.WARNING if root.level <= logging.DEBUG else max(logging.ERROR, root.level)
    for name in SEARCH_CLIENTS:
        logging.getLogger(name).setLevel(clients)
    for name in list(logging.root.manager.loggerDict):
        logger = logging.getLogger(name)
        if logger.handlers and name.split(".")[0] in ("celery", "uvicorn", "kombu", "aiohttp"):
            logger.handlers.clear()
            logger.propagate = True
