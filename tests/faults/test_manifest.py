"""A manifest that workers cannot read ends the run with an error, shown by the follower
and by `qfarm status`, instead of an endless re-send."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


def test_an_unreadable_manifest_fails_the_run_instead_of_looping(redis_server, farm_on, tmp_path, kit):
    farm = farm_on(redis_server)
    run_id = kit.detached_sweep(farm, tmp_path, 1)
    key = f"qfarm:run:{run_id}:manifest"
    manifest = json.loads(farm.redis.get(key))
    manifest["policy"]["title_boost"] = None  # what a non-finite float is written as
    farm.redis.set(key, json.dumps(manifest))
    farm.start_worker("w1", concurrency=4)
    res = farm.qfarm("sweep", "--attach", run_id, "--quiet", timeout_s=60)
    assert res.returncode == 1, res.stderr
    assert f"run {run_id} failed: " in res.stderr and "policy.title_boost" in res.stderr, res.stderr
    assert "lost with a killed worker" not in res.stderr
    status = farm.qfarm("status", run_id)
    assert "failed" in status.stdout and "policy.title_boost" in status.stdout, status.stdout
