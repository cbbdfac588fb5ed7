"""The one exception hierarchy of qfarm.

    QfarmError                      base; ``str(exc)`` is a one-line message for the user
    ├── InputError                  bad user input (files, flags, policy); never retried
    │   └── PolicyError             unknown policy key or bad value
    ├── ConfigError                 bad settings / environment variables
    ├── ServiceError                a service we depend on misbehaved
    │   ├── TransientServiceError   worth retrying (connect error, timeout, 429, 5xx)
    │   └── PermanentServiceError   not worth retrying (400, 401, 404, context length)
    └── RetrievalError              the search backend failed or the index is missing

Messages say what was wrong, where (file:line for input files) and how to fix it.
"""

from __future__ import annotations


class QfarmError(Exception):
    """Base of every error qfarm raises on purpose."""

    exit_code = 1


class InputError(QfarmError):
    """User input is wrong; the message says where and how to fix it."""

    exit_code = 2


class PolicyError(InputError):
    """A policy override names an unknown field or has a bad value."""


class ConfigError(QfarmError):
    """A setting (QFARM_* variable) is missing or invalid."""

    exit_code = 2


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
