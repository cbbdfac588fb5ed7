"""`qfarm doctor` against real parts: the test Redis, a started simulator, a Redis URL to a
closed port, a model the endpoint does not serve and a search cluster that is not there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

QFARM = str(Path(sys.executable).parent / "qfarm")
DB = int(os.environ.get("QFARM_TEST_REDIS_DB", "9"))
REDIS = f"redis://127.0.0.1:{os.environ.get('QFARM_TEST_REDIS_PORT', '6379')}/{DB}"


@pytest.fixture(scope="module")
def sim_url():
    from qfarm.ops.sim.launch import start_simulator

    with start_simulator(ttft_ms=0, tpot_ms=0) as sim:
        yield sim.url


def doctor(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([QFARM, "doctor", *args], env=env, capture_output=True, text=True,
                          timeout=60)


def test_doctor_with_redis_and_the_simulator_up_exits_0_and_names_each_part(env, sim_url):
    from qfarm.common.settings import DEFAULT_MODEL

    env.update(QFARM_REDIS_URL=REDIS, QFARM_LLM_ENDPOINTS=sim_url)
    res = doctor(env, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    report = json.loads(res.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert [c["health"] for c in report["checks"]] == ["ok", "warn", "ok", "ok", "skip", "ok"]
    assert checks["redis"]["data"]["url"] == REDIS and checks["redis"]["data"]["version"]
    workers = checks["workers"]["data"]  # none started here: every queue says so
    assert workers["missing"] == ["interactive", "retrieve", "generate", "verify"]
    assert "celery -A qfarm.worker worker -Q generate" in checks["workers"]["fix"]
    (endpoint,) = checks["llm"]["data"]["endpoints"]
    assert endpoint["simulator"] and endpoint["serves_model"] and DEFAULT_MODEL in endpoint["models"]
    assert checks["llm"]["data"]["profile"] == "hermes-3-8b"
    assert checks["index"]["data"]["index_version"] and checks["index"]["data"]["passages"] > 0
    assert checks["packages"]["data"]["celery"] and checks["packages"]["data"]["qfarm"]
    # The screen: one line a check, the simulator named as such.
    res = doctor(env)
    assert res.returncode == 0, res.stdout + res.stderr
    heads = [line.split()[:2] for line in res.stdout.splitlines() if not line.startswith(" ")]
    assert heads[:6] == [["ok", "redis"], ["warn", "workers"], ["ok", "llm"], ["ok", "index"],
                         ["skip", "search"], ["ok", "packages"]]
    assert "SIMULATED" in res.stdout and res.stderr == ""


def test_doctor_with_redis_down_exits_1_and_hides_the_password(env, unused_port):
    env.update(QFARM_REDIS_URL=f"redis://:hunter2secret@127.0.0.1:{unused_port}/0")
    res = doctor(env)
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stdout.startswith(f"fail  redis     redis://:***@127.0.0.1:{unused_port}/0 unreachable")
    assert "skip  workers   not asked: Redis is unreachable" in res.stdout
    assert "down or wrong: redis (exit 1)" in res.stdout
    assert "hunter2secret" not in res.stdout + res.stderr
    report = json.loads(doctor(env, "--json").stdout)
    assert report["exit_code"] == 1 and report["failed"] == ["redis"]


def test_doctor_fails_a_model_the_endpoint_does_not_serve(env, sim_url):
    env.update(QFARM_REDIS_URL=REDIS, QFARM_LLM_ENDPOINTS=sim_url, QFARM_MODEL="some/other-model")
    res = doctor(env, "--json")
    assert res.returncode == 1
    llm = next(c for c in json.loads(res.stdout)["checks"] if c["name"] == "llm")
    assert llm["health"] == "fail" and llm["data"]["profile"] == "default"
    assert "not 'some/other-model'" in llm["details"][0] and "QFARM_MODEL" in llm["fix"]


def test_doctor_says_in_one_line_that_the_search_cluster_is_not_there(env, unused_port):
    env.update(QFARM_REDIS_URL=REDIS, QFARM_RETRIEVER="opensearch",
               QFARM_ES_URL=f"http://127.0.0.1:{unused_port}")
    res = doctor(env)
    assert res.returncode == 1, res.stdout + res.stderr
    line = next(line for line in res.stdout.splitlines() if line.startswith("fail  search"))
    assert f"opensearch at http://127.0.0.1:{unused_port}: not usable" in line
    assert "is unreachable" in res.stdout and "Traceback" not in res.stderr
    # The local index is not what runs search now: shown, never failed.
    assert "(not searched: QFARM_RETRIEVER=opensearch)" in res.stdout


def test_doctor_fails_an_index_file_that_is_not_there_and_warns_of_a_default_one_not_built(
        env, tmp_path):
    env.update(QFARM_REDIS_URL=REDIS, QFARM_INDEX_PATH=str(tmp_path / "none.sqlite"))
    res = doctor(env, "--json")
    assert res.returncode == 1
    index = next(c for c in json.loads(res.stdout)["checks"] if c["name"] == "index")
    assert index["health"] == "fail" and "run `qfarm index` first" in index["fix"]
    del env["QFARM_INDEX_PATH"]  # the default index of an empty data directory: built on first use
    env["QFARM_DATA_DIR"] = str(tmp_path / "data")
    res = doctor(env, "--json")
    index = next(c for c in json.loads(res.stdout)["checks"] if c["name"] == "index")
    assert index["health"] == "warn" and "the first run builds it" in index["fix"]
    assert res.returncode == 0, res.stdout
