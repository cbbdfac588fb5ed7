"""`qfarm cache stats|prune` against the test Redis: entries written the way workers write
them (``WorkerStore.put_cached_many``), then counted, pruned by each filter, and left alone
by a dry run or a prune that names no filter."""

from __future__ import annotations

import json
import os
import time

import pytest
import redis

from qfarm.cli import main
from qfarm.common import keys
from qfarm.common.models import Mode, Row
from qfarm.common.vocab import ExitCode
from qfarm.worker.store import WorkerStore

DB = int(os.environ.get("QFARM_TEST_REDIS_DB", "9"))
REDIS = f"redis://127.0.0.1:{os.environ.get('QFARM_TEST_REDIS_PORT', '6379')}/{DB}"
NOW = time.time()
DAY = 24 * 3600


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch):
    c = redis.Redis.from_url(REDIS)
    c.flushdb()
    monkeypatch.setenv("QFARM_REDIS_URL", REDIS)
    yield c
    c.flushdb()


def _row(n: int, model: str, index: str, age_days: float) -> Row:
    return Row(run_id="r", job_id=f"j{n}", question=f"q{n}?", question_id=f"q{n}",
               mode=Mode.QUOTE, sample_index=0, model=model, index_version=index,
               finished_at=NOW - age_days * DAY)


@pytest.fixture
def cached(client: redis.Redis) -> redis.Redis:
    """Five entries: two old ones of model a, one recent of a on index v2, two recent of b;
    and a run's rows, which no cache command may touch."""
    WorkerStore(client).put_cached_many([
        ("d0", _row(0, "a", "v1", 40)), ("d1", _row(1, "a", "v1", 10)),
        ("d2", _row(2, "a", "v2", 1)), ("d3", _row(3, "b", "v1", 0.5)),
        ("d4", _row(4, "b", "v1", 0.1).model_dump_json()),
    ])
    client.hset(keys.rows_key("r"), "j0", "{}")
    return client


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["cache", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _left(client: redis.Redis) -> list[str]:
    return sorted(k.decode().removeprefix(keys.CACHE_PREFIX)
                  for k in client.scan_iter(match=keys.CACHE_PATTERN))


def test_stats_counts_entries_bytes_models_index_versions_and_age(cached, capsys):
    code, out, err = _cli(capsys, "stats", "--json")
    assert code == ExitCode.OK and err == ""
    stats = json.loads(out)
    assert stats["entries"] == 5 and stats["unreadable"] == 0 and stats["no_expiry"] == 0
    assert stats["bytes"] == sum(cached.strlen(keys.cache_key(f"d{i}")) for i in range(5))
    assert stats["by_model"] == {"a": 3, "b": 2}
    assert stats["by_index_version"] == {"v1": 4, "v2": 1}
    assert stats["oldest_finished_at"] == pytest.approx(NOW - 40 * DAY)
    assert stats["newest_finished_at"] == pytest.approx(NOW - 0.1 * DAY)
    assert stats["ttl_s"] == keys.CACHE_TTL_S
    code, out, _ = _cli(capsys, "stats")
    assert code == ExitCode.OK
    assert "entries: 5" in out and "by model: a=3  b=2" in out and "30 days" in out


def test_prune_deletes_what_every_filter_selects_and_nothing_else(cached, capsys):
    code, out, _ = _cli(capsys, "prune", "--older-than", "5", "--model", "a", "--json")
    assert code == ExitCode.OK and json.loads(out) == {"matched": 2, "deleted": 2, "dry_run": False}
    assert _left(cached) == ["d2", "d3", "d4"]
    code, out, _ = _cli(capsys, "prune", "--index-version", "v2")
    assert code == ExitCode.OK and "deleted 1 cache entries" in out
    assert _left(cached) == ["d3", "d4"]
    assert cached.hexists(keys.rows_key("r"), "j0")  # a run's rows are not the cache's


def test_dry_run_counts_and_deletes_nothing(cached, capsys):
    code, out, _ = _cli(capsys, "prune", "--model", "b", "--dry-run")
    assert code == ExitCode.OK and "2 cache entries match; nothing deleted" in out
    code, out, _ = _cli(capsys, "prune", "--all", "--dry-run", "--json")
    assert json.loads(out) == {"matched": 5, "deleted": 0, "dry_run": True}
    assert _left(cached) == ["d0", "d1", "d2", "d3", "d4"]


def test_all_empties_the_cache_and_only_the_cache(cached, capsys):
    code, out, _ = _cli(capsys, "prune", "--all", "--json")
    assert code == ExitCode.OK and json.loads(out)["deleted"] == 5
    assert _left(cached) == [] and cached.hexists(keys.rows_key("r"), "j0")


@pytest.mark.parametrize("args", [[], ["--dry-run"], ["--all", "--model", "a"],
                                  ["--older-than", "-1"]])
def test_prune_refuses_without_a_filter_or_with_a_bad_one_in_one_line(cached, capsys, args):
    code, out, err = _cli(capsys, "prune", *args)
    assert code == ExitCode.USAGE and out == ""
    assert err.startswith("qfarm: error: ") and err.count("\n") == 1
    assert _left(cached) == ["d0", "d1", "d2", "d3", "d4"]


@pytest.mark.parametrize("action", [["stats"], ["prune", "--all"]])
def test_redis_down_is_one_line_and_a_service_failure(monkeypatch, capsys, unused_port, action):
    monkeypatch.setenv("QFARM_REDIS_URL", f"redis://127.0.0.1:{unused_port}/0")
    code, out, err = _cli(capsys, *action)
    assert code == ExitCode.FAILED and out == ""
    assert err.startswith("qfarm: error: cannot reach Redis") and err.count("\n") == 1


def test_a_value_that_is_not_a_row_is_counted_and_only_all_removes_it(cached, capsys):
    cached.set(keys.cache_key("bad"), b"not json")  # no expiry either
    stats = json.loads(_cli(capsys, "stats", "--json")[1])
    assert (stats["entries"], stats["unreadable"], stats["no_expiry"]) == (6, 1, 1)
    assert stats["by_model"] == {"a": 3, "b": 2}
    _cli(capsys, "prune", "--older-than", "0")
    assert _left(cached) == ["bad"]
    _cli(capsys, "prune", "--all")
    assert _left(cached) == []


def _reply(model: str, root: str, age_days: float) -> str:
    from qfarm.common.cache import ResponseEntry

    return ResponseEntry(model=model, served={"id": model, "root": root, "server": "vllm"},
                         text="t", finish_reason="stop", usage={"prompt_tokens": 1},
                         model_ms=10.0, created_at=NOW - age_days * DAY).model_dump_json()


def test_the_response_cache_is_counted_and_pruned_beside_the_result_cache(cached, capsys):
    from qfarm.worker.llm import RedisResponseCache

    RedisResponseCache(cached).put_many([
        ("r0", _reply("a", "/models/a", 40)), ("r1", _reply("a", "/models/a-rev2", 1)),
        ("r2", _reply("b", "/models/b", 0.5)),
    ])
    code, out, _ = _cli(capsys, "stats", "--json")
    stats = json.loads(out)
    assert stats["entries"] == 5  # the result cache's figures stay where they were
    replies = stats["response"]
    assert replies["entries"] == 3 and replies["by_model"] == {"a": 2, "b": 1}
    assert replies["by_revision"] == {"/models/a": 1, "/models/a-rev2": 1, "/models/b": 1}
    assert replies["oldest_finished_at"] == pytest.approx(NOW - 40 * DAY)
    _, out, _ = _cli(capsys, "stats")
    assert "response cache (model replies of runs with --cache):" in out
    assert "by served revision: /models/a=1" in out
    # Both caches by default; --kind narrows to one; --index-version never selects a reply.
    code, out, _ = _cli(capsys, "prune", "--older-than", "5", "--json")
    assert json.loads(out) == {"matched": 3, "deleted": 3, "dry_run": False}  # d0, d1, r0
    code, out, _ = _cli(capsys, "prune", "--index-version", "v1", "--dry-run", "--json")
    assert json.loads(out)["matched"] == 2
    code, out, _ = _cli(capsys, "prune", "--all", "--kind", "response", "--json")
    assert json.loads(out)["deleted"] == 2
    assert _left(cached) == ["d2", "d3", "d4"]
    assert not list(cached.scan_iter(match=keys.RESPONSE_CACHE_PATTERN))
