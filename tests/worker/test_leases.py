"""Message leases (worker/leases.py): a live worker's renewals keep kombu from restoring
the messages it holds; a silent worker's messages come back after the timeout."""

from __future__ import annotations

import os
import time

import pytest
import redis
from kombu import Connection

from qfarm.common.keys import UNACKED_INDEX_KEY, UNACKED_KEY
from qfarm.worker import broker, leases

PORT = int(os.environ.get("QFARM_TEST_REDIS_PORT", "6379"))
DB = os.environ.get("QFARM_TEST_REDIS_DB", "9")
URL = f"redis://127.0.0.1:{PORT}/{DB}"
QUEUE = "qfarm-test-leases"


@pytest.fixture
def client():
    c = redis.Redis.from_url(URL)
    c.delete(UNACKED_KEY, UNACKED_INDEX_KEY, QUEUE)
    yield c
    c.delete(UNACKED_KEY, UNACKED_INDEX_KEY, QUEUE)


def _taken(conn: Connection, vt: int) -> tuple[object, str]:
    """A message published and taken (unacknowledged), as a worker holds one."""
    channel = conn.channel()
    channel.visibility_timeout = vt
    q = conn.SimpleQueue(QUEUE, channel=channel)
    q.put({"job": 1})
    message = q.get(timeout=5)
    return channel, message.delivery_tag


def test_a_renewed_message_is_not_restored_and_a_silent_one_is(client):
    broker.register()
    with Connection(URL, transport_options={"visibility_timeout": 2}) as conn:
        channel, tag = _taken(conn, vt=2)
        assert client.hexists(UNACKED_KEY, tag)
        # Delivered 100 s ago: far past the 2 s timeout.
        client.zadd(UNACKED_INDEX_KEY, {tag: time.time() - 100})
        lease = leases.MessageLeases(client, lambda: [tag], interval_s=1)
        assert lease.renew() == 1
        assert client.zscore(UNACKED_INDEX_KEY, tag) > time.time() - 5
        channel.qos.restore_visible(num=100, interval=1)
        assert client.hexists(UNACKED_KEY, tag) and client.llen(QUEUE) == 0
        # Silent (no renewal) past the timeout: kombu puts it back into its queue.
        client.zadd(UNACKED_INDEX_KEY, {tag: time.time() - 100})
        channel.qos.restore_visible(num=100, interval=1)
        assert not client.hexists(UNACKED_KEY, tag) and client.llen(QUEUE) == 1


def test_a_restored_message_is_not_brought_back_by_a_late_renewal(client):
    """A host that comes back after its messages were restored renews nothing."""
    lease = leases.MessageLeases(client, lambda: ["gone-tag"], interval_s=1)
    assert lease.renew() == 0
    assert client.zscore(UNACKED_INDEX_KEY, "gone-tag") is None


def test_the_thread_renews_until_stopped_and_says_one_line_per_outage(client, caplog):
    broker.register()
    with Connection(URL) as conn:
        _, tag = _taken(conn, vt=60)
        client.zadd(UNACKED_INDEX_KEY, {tag: 1.0})
        lease = leases.MessageLeases(client, lambda: [tag], interval_s=0.05)
        lease.start()
        deadline = time.monotonic() + 10
        while client.zscore(UNACKED_INDEX_KEY, tag) == 1.0 and time.monotonic() < deadline:
            time.sleep(0.05)
        lease.stop()
        assert client.zscore(UNACKED_INDEX_KEY, tag) > 1.0
        assert not lease.thread.is_alive()
    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    failing = leases.MessageLeases(dead, lambda: ["t"], interval_s=0.02)
    failing.start()
    time.sleep(0.3)
    failing.stop()
    warnings = [r for r in caplog.records if "cannot renew message leases" in r.getMessage()]
    assert len(warnings) == 1


def test_the_redelivery_bound_follows_the_visibility_timeout():
    assert leases.renew_interval_s(60) == 10 and leases.restore_interval_s(60) == 10
    assert leases.redelivery_bound_s(60) == 60 + 10 + 10 + 10
    assert leases.redelivery_bound_s(8) == 8 + 2 + 4 + 10


def test_held_tags_are_those_of_the_reserved_and_active_requests():
    from celery.worker import state

    from qfarm.worker.celery import held_delivery_tags

    class Message:
        def __init__(self, tag: str | None):
            self.delivery_tag = tag

    class Request:
        def __init__(self, tag: str | None):
            self.message = Message(tag)

    held = [Request("reserved-1"), Request("active-1"), Request(None)]
    state.reserved_requests.add(held[0])
    state.active_requests.add(held[1])
    state.reserved_requests.add(held[2])
    try:
        assert sorted(held_delivery_tags()) == ["active-1", "reserved-1"]
    finally:
        for r in held:
            state.reserved_requests.discard(r)
            state.active_requests.discard(r)
