"""The repaired Redis transport (worker/broker.py), against the test Redis server."""

from __future__ import annotations

import os

import pytest
from kombu import Connection
from kombu.transport import redis as kombu_redis

from qfarm.worker import broker

PORT = int(os.environ.get("QFARM_TEST_REDIS_PORT", "6379"))
URL = f"redis://127.0.0.1:{PORT}/{os.environ.get('QFARM_TEST_REDIS_DB', '9')}"


def test_redis_urls_get_the_repaired_transport():
    broker.register()
    for url in (URL, URL.replace("redis://", "rediss://")):
        conn = Connection(url)
        assert conn.transport_cls == url.split(":")[0]  # kombu still sees the scheme (TLS for rediss)
        assert conn.get_transport_cls() is broker.Transport


def _detached_channel(transport_cls: type) -> kombu_redis.Channel:
    """A channel as Celery's consumer leaves it after losing Redis: ``Connection.collect()``
    dropped its pools (a first close) and detached the transport from the connection."""
    conn = Connection(URL, transport=transport_cls)
    channel = conn.channel()
    channel._disconnect_pools()
    conn.transport.client = None  # what Connection.collect() does last
    return channel


def test_a_channel_still_reaches_redis_after_its_transport_was_detached():
    channel = _detached_channel(broker.Transport)
    with channel.conn_or_acquire() as client:  # what restoring or acknowledging a message does
        assert client.ping()


def test_kombus_own_channel_cannot_reach_redis_once_detached():
    """The defect the transport repairs (it killed workers), so that a kombu release that
    fixes it is noticed: the repair can then go."""
    channel = _detached_channel(kombu_redis.Transport)
    with pytest.raises(AttributeError, match="hostname"):
        with channel.conn_or_acquire():
            pass
