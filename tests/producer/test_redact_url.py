"""Redis URLs printed in errors and status lines never show a password, in any URL form."""

from __future__ import annotations

import pytest
import redis

from qfarm.common.urls import redact_url

SECRET = "s3cr3t"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://alice:s3cr3t@db:6379/0", "redis://alice:***@db:6379/0"),
        ("redis://:s3cr3t@db:6379/0", "redis://:***@db:6379/0"),
        ("redis://db:6379/0?password=s3cr3t", "redis://db:6379/0?password=***"),
        ("redis://db:6379/0?db=2&password=s3cr3t&socket_timeout=5",
         "redis://db:6379/0?db=2&password=***&socket_timeout=5"),
        ("redis://alice@db:6379/0?password=s3cr3t", "redis://alice@db:6379/0?password=***"),
        ("redis://:s3cr3t%40x%3Ay@db:6379/0", "redis://:***@db:6379/0"),  # percent-encoded
        ("redis://:s3cr3t@x@db:6379/0", "redis://:***@db:6379/0"),  # raw @ in the password
        ("redis://alice:s3:cr3t@db/0", "redis://alice:***@db/0"),  # raw : in the password
        ("rediss://alice:s3cr3t@db:6380/0", "rediss://alice:***@db:6380/0"),
        ("unix://:s3cr3t@/run/redis.sock?db=0", "unix://:***@/run/redis.sock?db=0"),
        ("redis://db:6379/0", "redis://db:6379/0"),
        ("redis://alice@db:6379/0", "redis://alice@db:6379/0"),  # a user name is not a secret
        # http(s): a user name alone is the credential; query tokens and keys are secrets
        ("http://s3cr3t@gpu1:8000", "http://***@gpu1:8000"),
        ("https://gw:8443/v1?token=s3cr3t&x=1", "https://gw:8443/v1?token=***&x=1"),
        ("http://gpu1:8000?api_key=s3cr3t", "http://gpu1:8000?api_key=***"),
        ("http://gpu1:8000?API-KEY=s3cr3t&Access_Token=s3cr3t",
         "http://gpu1:8000?API-KEY=***&Access_Token=***"),
    ],
)
def test_every_url_form_loses_its_password(url: str, expected: str):
    assert redact_url(url) == expected
    assert SECRET not in redact_url(url)


@pytest.mark.parametrize(
    "url",
    ["redis://:s3cr3t@x@db:6379/0", "redis://db:6379/0?password=s3cr3t", "rediss://:s3cr3t%40x@db/0"],
)
def test_the_redacted_part_is_the_password_redis_py_would_send(url: str):
    # The redaction splits the URL as the client does, so what it hides is the real password.
    kwargs = redis.connection.parse_url(url)
    assert kwargs["password"].startswith(SECRET)
    assert kwargs["host"] == "db"


def test_a_url_that_does_not_parse_is_not_echoed():
    assert SECRET not in redact_url("redis://:s3cr3t@[db:6379/0")
