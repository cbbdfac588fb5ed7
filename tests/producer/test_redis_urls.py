"""QFARM_REDIS_URL is read by redis-py (rows, progress, /metrics) and by kombu (Celery's
broker): accepted URLs mean the same server, database and password to both, refused ones
are one line at start-up, for the producer and for a worker alike."""

from __future__ import annotations

import subprocess
from pathlib import Path

import kombu
import pytest
from kombu.transport.redis import Channel
from redis.connection import parse_url

from qfarm.common.errors import ConfigError
from qfarm.common.redis_urls import broker_url, redis_url_problem
from qfarm.common.settings import Settings

from .conftest import REPO, VENV_BIN, Farm

ACCEPTED = [
    "redis://127.0.0.1:6379/0",
    "redis://127.0.0.1:6379",
    "redis://127.0.0.1:6379/",
    "redis://db.example:6380/15",
    "redis://:s3cr3t@db:6379/2",
    "redis://alice:s3cr3t@db:6379/2",
    "redis://db:6379/2?password=s3cr3t",
    "redis://db:6379/2?password=p%40ss%3Aw%2Ford+x",  # @ : / and a space, percent-encoded
    "redis://alice@db:6379/2?password=s3cr3t",
    "redis://db:6379/2?username=alice&password=s3cr3t",
    "rediss://:s3cr3t@db:6380/0?ssl_cert_reqs=required",
]

REFUSED = [
    ("redis://db:6379/abc", "the path must be the database number"),
    ("redis://db:6379/1/", "the path must be the database number"),
    ("redis://db:6379/-1", "the path must be the database number"),
    ("redis://db:6379/0?db=2", "query parameter 'db'"),
    ("redis://db:6379/0?socket_timeout=5", "QFARM_BROKER_SOCKET_TIMEOUT_S"),
    ("redis://db:6379/0?protocol=3", "query parameter 'protocol' is not understood"),
    ("redis://db:6379/0?password=a&password=b", "given twice"),
    ("redis://:a@db:6379/0?password=b", "the password is given twice"),
    ("redis://db:6379/0?ssl_cert_reqs=none", "needs a TLS URL"),
    ("unix:///run/redis.sock", "unix://"),
    ("http://db:6379/0", "the scheme must be redis:// or rediss://"),
    ("redis://db:99999/0", "not a URL"),
    ("redis://[::1/0", "not a URL"),
]


def kombu_reads(url: str) -> tuple[str | None, int | None, int, str | None, str | None]:
    """(host, port, db, username, password) as Celery's broker reads ``url`` (no I/O)."""
    conn = kombu.Connection(url)
    db = Channel._prepare_virtual_host(None, conn.virtual_host)  # type: ignore[arg-type]
    return conn.hostname, conn.port, db, conn.userid, conn.password


def redis_py_reads(url: str) -> tuple[str | None, int | None, int, str | None, str | None]:
    kw = parse_url(url)
    return kw.get("host"), kw.get("port"), kw.get("db", 0), kw.get("username"), kw.get("password")


@pytest.mark.parametrize("url", ACCEPTED)
def test_an_accepted_url_means_the_same_to_redis_py_and_to_the_broker(url: str) -> None:
    assert redis_url_problem(url) is None
    assert kombu_reads(broker_url(url)) == redis_py_reads(url)


@pytest.mark.parametrize(("url", "message"), REFUSED)
def test_a_url_the_two_libraries_read_differently_is_refused_at_load(url: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        Settings(redis_url=url)
    text = str(info.value)
    assert text.startswith("QFARM_REDIS_URL: ") and message in text and "\n" not in text, text
    assert "s3cr3t" not in text


def test_a_refusal_never_repeats_the_password() -> None:
    with pytest.raises(ConfigError) as info:
        Settings(redis_url="redis://:s3cr3t@db:6379/abc?password=s3cr3t")
    assert "s3cr3t" not in str(info.value)


@pytest.mark.slow
def test_a_password_given_as_a_query_parameter_works_for_workers_and_producer(
    own_redis, farm: Farm, tmp_path: Path
) -> None:
    """redis-py's ``?password=`` form: the worker used to die at start-up (kombu: multiple
    values for 'password'); now it consumes and the sweep completes."""
    url = own_redis("--requirepass", "pw@x y", password="pw%40x+y")
    assert url.endswith("?password=pw%40x+y")
    farm.env["QFARM_REDIS_URL"] = url
    farm.start_worker("all", concurrency=4)
    (tmp_path / "q.txt").write_text("Who were the members of the Beatles?\n")
    res = farm.qfarm("sweep", str(tmp_path / "q.txt"), "--modes", "quote,claim_lattice", "--quiet")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "(2/2 jobs)" in res.stdout, res.stdout


@pytest.mark.slow
@pytest.mark.parametrize("url", ["redis://127.0.0.1:{port}/abc", "redis://127.0.0.1:{port}/0?db=1"])
def test_a_worker_given_a_url_the_broker_cannot_read_stops_with_one_line(
    own_redis, farm: Farm, url: str
) -> None:
    port = own_redis().split(":")[2].split("/")[0]
    env = dict(farm.env, QFARM_REDIS_URL=url.format(port=port))
    res = subprocess.run(
        [str(VENV_BIN / "celery"), "-A", "qfarm.worker", "worker", "-Q", "retrieve", "-P", "threads",
         "-c", "1", "--without-gossip", "--without-mingle"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
    )
    output = (res.stdout + res.stderr).strip()
    assert res.returncode == 2, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    errors = [line for line in output.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith("qfarm worker: error: QFARM_REDIS_URL: "), output
