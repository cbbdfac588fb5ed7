"""The one exception hierarchy of qfarm.

    QfarmError                      base; ``str(exc)`` is a one-line message for the user
    ├── InputError                  bad user input (files, flags, policy); never retried
    │   ├── PolicyError             unknown policy key or bad value
    │   └── RunStateError           the run's state forbids it (resume a complete run)
    ├── ConfigError                 bad settings / environment variables
    ├── ServiceError                a service we depend on misbehaved (exit 1)
    │   ├── ServiceUnreachableError Redis did not answer (exit 1, like any service down)
    │   ├── TransientServiceError   worth retrying (connect error, timeout, 429, 5xx)
    │   │   ├── LLMConnectError         cannot connect to an LLM endpoint
    │   │   ├── LLMTimeoutError         connected, then timed out
    │   │   ├── LLMDroppedError         the connection dropped or failed otherwise
    │   │   ├── MalformedReplyError     a 200 whose body or choices are unusable
    │   │   ├── UnfinishedChoiceError   a choice finished other than stop/length
    │   │   └── TransientStatusError    408/409/425, 5xx (also a stream's error event)
    │   │       └── BackPressureError   429, vLLM's queue-full 503: a live server pushing back
    │   │           └── QueueFullError  vLLM's queue-full 503 (admission control)
    │   └── PermanentServiceError   not worth retrying (400, 401, 404, context length)
    │       ├── PermanentStatusError    400, 401/403, 404, 501… (also a stream's error event)
    │       │   └── ContextOverflowError  the prompt does not fit max_model_len
    │       └── OversizedReplyError     a reply larger than max_tokens can explain
    └── RetrievalError              the search backend failed or the index is missing

Messages say what was wrong, where (file:line for input files) and how to fix it.
"""

from __future__ import annotations

from typing import Any

from qfarm.common.vocab import ExitCode


class QfarmError(Exception):
    """Base of every error qfarm raises on purpose."""

    exit_code: int = ExitCode.FAILED


class InputError(QfarmError):
    """User input is wrong; the message says where and how to fix it."""

    exit_code = ExitCode.USAGE


class PolicyError(InputError):
    """A policy override names an unknown field or has a bad value."""


class RunStateError(InputError):
    """What was asked of a run its state forbids (``common/runstatus.py``): resume a run
    that is complete or still running, start one that has started."""


class ConfigError(QfarmError):
    """A setting (QFARM_* variable) is missing or invalid."""

    exit_code = ExitCode.USAGE


class ServiceError(QfarmError):
    """A service (LLM endpoint, Redis, search cluster) failed."""

    def __init__(
        self,
        message: str,
        *,
        endpoint: str | None = None,
        job_id: str | None = None,
        attempts: int | None = None,
    ):
        super().__init__(message)
        self.endpoint = endpoint
        self.job_id = job_id
        self.attempts = attempts  # requests sent before giving up (LLM gateway)


class ServiceUnreachableError(ServiceError):
    """A service the command needs did not answer (Redis): a service failed, so the command
    exits 1, as it does when the search backend fails (``RetrievalError``), never 2, which
    says the input was wrong."""


class TransientServiceError(ServiceError):
    """A failure worth retrying, possibly elsewhere."""

    def __init__(
        self,
        message: str,
        *,
        endpoint: str | None = None,
        job_id: str | None = None,
        attempts: int | None = None,
        retry_after_s: float | None = None,
    ):
        super().__init__(message, endpoint=endpoint, job_id=job_id, attempts=attempts)
        self.retry_after_s = retry_after_s


class PermanentServiceError(ServiceError):
    """A failure that will not go away by retrying."""


class LLMConnectError(TransientServiceError):
    """The LLM endpoint refused or did not accept the connection."""


class LLMTimeoutError(TransientServiceError):
    """The LLM endpoint accepted the connection, then took too long."""


class LLMDroppedError(TransientServiceError):
    """The connection to the LLM endpoint dropped (or failed in another transport way)."""


class MalformedReplyError(TransientServiceError):
    """The LLM endpoint answered 200 with a body, stream or choice qfarm cannot use."""


class UnfinishedChoiceError(TransientServiceError):
    """A choice ended with a finish_reason other than stop/length: the request did not complete."""


class TransientStatusError(TransientServiceError):
    """An HTTP status (or a stream's error event with that code) worth retrying."""

    def __init__(self, message: str, *, status: int, **context: Any):
        super().__init__(message, **context)  # endpoint, job_id, retry_after_s
        self.status = status


class BackPressureError(TransientStatusError):
    """A live server pushing back (a proxy's 429, vLLM's queue-full 503): wait or go
    elsewhere; not a sign the server is failing, so the breaker ignores it."""


class QueueFullError(BackPressureError):
    """vLLM's admission control is full (503): the gateway waits for it without spending
    the attempt budget, unlike a 429 whose Retry-After says how long to stay away."""


class PermanentStatusError(PermanentServiceError):
    """An HTTP status (or a stream's error event with that code) that retrying cannot fix."""

    def __init__(self, message: str, *, status: int, **context: Any):
        super().__init__(message, **context)  # endpoint, job_id
        self.status = status


class ContextOverflowError(PermanentStatusError):
    """The prompt (or prompt + max_tokens) does not fit the endpoint's ``max_model_len``."""


class OversizedReplyError(PermanentServiceError):
    """A reply larger than the request's ``max_tokens`` can explain: read no further, and
    not asked again (the same request would bring the same flood)."""


class ManifestError(QfarmError):
    """A worker cannot read a run's manifest: an error of the whole run, not of a job."""


class RetrievalError(QfarmError):
    """Retrieval failed: backend unreachable, index missing, bad query."""


def first_validation_error(exc: Exception, whole: str) -> tuple[str, str]:
    """(where, message) of a pydantic ValidationError's first error; ``whole`` names the
    object when the error is not in one field."""
    errors = getattr(exc, "errors", None)
    first = errors()[0] if callable(errors) else {"loc": (), "msg": str(exc)}
    return ".".join(str(p) for p in first["loc"]) or whole, str(first["msg"])
