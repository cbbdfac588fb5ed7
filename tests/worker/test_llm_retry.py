"""Backoff, Retry-After parsing and the transient/permanent split (pure)."""

from __future__ import annotations

import email.utils

import pytest

from qfarm.worker.llm.retry import is_transient_status, parse_retry_after


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("3", 3.0),
        ("0.5", 0.5),
        (" 10 ", 10.0),
        ("-4", 0.0),
        ("", None),
        (None, None),
        ("soon", None),
    ],
)
def test_retry_after_seconds(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value) == expected


def test_retry_after_http_date() -> None:
    now = 1_700_000_000.0
    header = email.utils.formatdate(now + 30, usegmt=True)
    assert parse_retry_after(header, now_epoch=now) == pytest.approx(30.0, abs=1.0)


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504])
def test_transient_statuses(status: int) -> None:
    assert is_transient_status(status)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422])
def test_permanent_statuses(status: int) -> None:
    assert not is_transient_status(status)
