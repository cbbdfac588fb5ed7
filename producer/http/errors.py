"""Every error of the HTTP API has one shape: status, the field at fault, a one-line message."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from kombu.exceptions import OperationalError
from redis.exceptions import RedisError
from starlette.exceptions import HTTPException as StarletteHTTPException

from qfarm.common.errors import ConfigError, InputError, ManifestError, QfarmError


class ApiError(Exception):
    def __init__(self, status: int, message: str, field: str | None = None):
        super().__init__(message)
        self.status, self.message, self.field = status, message, field


def problem(status: int, message: str, field: str | None = None,
             headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"status": status, "field": field, "message": message}},
                        status_code=status, headers=headers)


def from_validation(exc: Exception) -> ApiError:
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        return first_error(exc.errors())
    return ApiError(422, f"body: {exc}")


def first_error(errors: Any) -> ApiError:
    first = list(errors)[0]
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    where = ".".join(loc) or "body"
    msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    if first.get("type") == "extra_forbidden":
        msg = "unknown field"
    return ApiError(422, f"{where}: {msg}", where)


def install_errors(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return problem(exc.status, exc.message, exc.field,
                        headers={"WWW-Authenticate": "Bearer"} if exc.status == 401 else None)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        err = first_error(exc.errors())
        return problem(err.status, err.message, err.field)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return problem(exc.status_code, str(exc.detail))

    @app.exception_handler(RedisError)
    @app.exception_handler(OperationalError)
    async def redis_gone(_: Request, exc: Exception) -> JSONResponse:
        # Redis went away under a running server (the client connected at start-up): the
        # farm's state cannot be read or changed now, which is the farm's state, not a bug.
        # The exception's own text may name the server; the message says what to do.
        return problem(503, f"Redis is not answering ({type(exc).__name__}); the farm's runs "
                            "and queues live there: retry once it is back (GET /healthz says "
                            "when)", headers={"Retry-After": "5"})

    @app.exception_handler(QfarmError)
    async def qfarm_error(_: Request, exc: QfarmError) -> JSONResponse:
        # Input errors are the caller's (4xx); the rest are the farm's state: no worker,
        # no endpoints, Redis down (503). Messages are qfarm's own one-liners, which
        # never carry a secret (Redis URLs are redacted where they are made).
        if isinstance(exc, ManifestError):
            return problem(409, str(exc))
        if isinstance(exc, InputError):
            status = 404 if "not found" in str(exc) or "no such" in str(exc) else 422
            return problem(status, str(exc))
        if isinstance(exc, ConfigError):
            return problem(503, str(exc))
        return problem(503, str(exc))
