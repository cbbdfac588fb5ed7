"""The farm across hosts whose network fails.

One split farm for the module (tests/faults/netns.py, netfarm.py), each piece on a
namespace host of its own: Redis (with a fault proxy in front of it, which every worker
goes through), two simulators, the cpu role, the generate role on two hosts, the
interactive role, and a host for a producer. Every role runs under the supervision the
farm ships (``python -m qfarm.ops.farm up`` inside its host). The scenarios run in this
file's order (the host lost for good is the last). Each asserts that every planned job
id has exactly one row in Redis and in rows.jsonl and that the summary says so, with no
hand from the test but the fault, and prints what the fault cost
(``pytest -s | grep net-fault``; docs/distributed.md, "Hosts whose network fails").
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import pytest

pytestmark = pytest.mark.slow

# A link cut of 60 s is the fault to ride out; here a generate host stays cut until its
# bundles have rows made elsewhere, which must happen within that (the bound of the
# suite's 8 s visibility timeout is 24 s: qfarm.worker.leases.redelivery_bound_s).
MAX_CUT_S = 60
STALL_S = 20  # the worker<->Redis link holds every byte this long (4 x the suite's 5 s socket timeout)
RESETS_FOR_S, RESET_EVERY_S = 20, 2  # then resets every connection this often
PRODUCER_CUT_S = 10
ENDPOINT_CUT_S = 12


@dataclass
class Split:
    hosts: Any
    redis_url: str  # direct, for the producer and the test
    proxy_ctl: tuple[str, int]
    sims: list[str]
    workers: dict[str, Any]  # host name -> WorkerHost


@pytest.fixture(scope="module")
def split(hosts) -> Split:
    net = hosts.net
    rh = net.add("redis")
    redis_url = hosts.redis(rh)
    proxy, ctl = hosts.proxy(rh, ("127.0.0.1", 6379))
    sims = [hosts.simulator(net.add(f"sim{i}"), ttft_ms=30, tpot_ms=10, wait=False) for i in (1, 2)]
    for sim in sims:  # they start side by side
        hosts.wait_http(sim)
    hosts.base_env.update(
        QFARM_REDIS_URL=f"redis://{proxy}/0",
        QFARM_LLM_ENDPOINTS=",".join(sims),
        # An answer takes about half a second; a request to a cut endpoint fails over after 10 s.
        QFARM_LLM_TIMEOUT_S="10",
        QFARM_LLM_CONNECT_TIMEOUT_S="2",
        QFARM_LLM_BREAKER_COOLDOWN_S="2",
    )
    workers = {}
    for name, roles, env in [("cpu", "cpu", {"FARM_CPU_CONCURRENCY": "2"}),
                             ("gen1", "gpu", {"FARM_GPU_CONCURRENCY": "2"}),
                             ("gen2", "gpu", {"FARM_GPU_CONCURRENCY": "2"}),
                             ("ia", "interactive", {"FARM_INTERACTIVE_CONCURRENCY": "4"})]:  # fmt: skip
        workers[name] = hosts.up(net.add(name), roles, wait=False, **env)
    hosts.wait_running()
    net.add("prod")
    return Split(hosts, redis_url, ctl, sims, workers)


# ---------------------------------------------------------------- helpers


def _app(redis_url: str):
    from qfarm.common.settings import Settings
    from qfarm.worker.celery import configure_app

    return configure_app(Settings(redis_url=redis_url))


def _inspect(redis_url: str, worker: str, what: str = "active") -> list[dict] | None:
    """``worker``'s tasks (active or reserved), or None if it does not answer."""
    import redis

    try:
        replies = getattr(_app(redis_url).control.inspect(destination=[worker], timeout=1.0), what)()
    except (redis.RedisError, OSError):  # a pooled connection to another module's Redis
        return None
    return None if not replies or worker not in replies else replies[worker]


def _held_jobs(farm, redis_url: str, worker: str, planned: set[str]) -> set[str]:
    """The job ids in the bundles ``worker`` holds (running or reserved), read from the
    messages kombu keeps in its ``unacked`` hash for them."""
    from qfarm.common.keys import UNACKED_KEY

    task_ids = {t["id"] for what in ("active", "reserved") for t in _inspect(redis_url, worker, what) or []}
    held: set[str] = set()
    for raw in farm.redis.hvals(UNACKED_KEY):
        message = json.loads(raw)[0]
        if message["headers"].get("id") in task_ids:
            body = base64.b64decode(message["body"]).decode()
            held |= {j for j in planned if j in body}
    return held


def _sweep(farm, tmp_path, n: int, *extra: str) -> subprocess.Popen:
    """A following sweep in the test's namespace; ``--burn``: each scenario's jobs reach
    the model (the same questions ran in the scenarios before)."""
    q = tmp_path / "q.txt"
    q.write_text("\n".join(QUESTIONS) + "\n")
    return farm.qfarm_bg("sweep", str(q), "-n", str(n), "--quiet", "--burn", *extra)


def _run_id(farm, before: set[bytes]) -> str:
    assert farm.wait_for(lambda: set(farm.redis.keys("qfarm:run:*:rows")) - before, timeout_s=60)
    (key,) = set(farm.redis.keys("qfarm:run:*:rows")) - before
    return key.decode().split(":")[2]


def _llm_calls(split: Split) -> int:
    """Generation requests both simulators have answered so far."""
    import httpx

    return sum(sum(1 for r in httpx.get(f"{sim}/sim/stats", timeout=10).json()["requests"]
                   if "completions" in r["path"]) for sim in split.sims)  # fmt: skip


def _cost(kit, farm, run_id, name, t_fault, planned, err, calls: int | None = None, **extra) -> dict:
    cost = kit.fault_cost(farm, run_id, name, t_fault, planned=len(planned), stderr=err, llm_calls=calls)
    cost.update(extra)
    print("net-fault " + json.dumps(cost))
    return cost


def _no_operator_needed(split: Split) -> None:
    """Every role on every host that still exists runs; none was given up on."""
    for name, wh in split.workers.items():
        if name in split.hosts.net.hosts:
            states = wh.farm("status").stdout
            assert "FATAL" not in states and states.count("RUNNING") == 1, f"{name}: {states}"


QUESTIONS: list[str] = []


@pytest.fixture(autouse=True)
def _questions(kit) -> None:
    QUESTIONS[:] = kit.questions


# ---------------------------------------------------------------- scenarios


def test_split_farm_runs_a_sweep_and_concurrent_asks_and_status_shows_each_worker_by_host_and_role(
    split, tmp_path, kit
):
    farm = split.hosts.producer_of(split.redis_url)
    n = 2
    planned = kit.planned_ids(n)
    before = set(farm.redis.keys("qfarm:run:*:rows"))
    sweep = _sweep(farm, tmp_path, n)
    run_id = _run_id(farm, before)
    asks = [farm.qfarm_bg("ask", "--json", "--burn", "--timeout", "120", q) for q in kit.questions[:3]]
    for ask in asks:
        out, err = ask.communicate(timeout=180)
        assert ask.returncode == 0, err
        assert json.loads(out), out[:2000]
    _, err = sweep.communicate(timeout=240)
    assert sweep.returncode == 0, err
    kit.assert_exactly_once(farm, run_id, planned)
    status = farm.qfarm("status")
    assert status.returncode == 0, status.stderr
    for worker in ("cpu@cpu", "gpu@gen1", "gpu@gen2", "interactive@ia"):
        assert worker in status.stdout, status.stdout
    assert "qfarm.run_job" in split.workers["ia"].log("interactive"), "the asks did not run on the interactive host"
    _no_operator_needed(split)


def test_worker_redis_link_stalls_then_resets_and_no_row_is_lost_or_doubled(split, tmp_path, kit):
    from faultproxy import control  # type: ignore[import-not-found]

    farm = split.hosts.producer_of(split.redis_url)
    n = 6
    planned = kit.planned_ids(n)
    before = set(farm.redis.keys("qfarm:run:*:rows"))
    calls = _llm_calls(split)
    sweep = _sweep(farm, tmp_path, n)
    run_id = _run_id(farm, before)
    rows_key = f"qfarm:run:{run_id}:rows"
    assert farm.wait_for(lambda: farm.redis.hlen(rows_key) >= 16, timeout_s=120)
    t_stall = time.time()
    control(split.proxy_ctl, "stall")
    time.sleep(STALL_S)
    stalled_rows = farm.redis.hlen(rows_key)
    control(split.proxy_ctl, "flow")
    t_flow = time.time()
    # Rows land again once the link flows: nobody is stuck on the connections it held.
    assert farm.wait_for(lambda: farm.redis.hlen(rows_key) > stalled_rows, timeout_s=120)
    flowing_after_s = time.time() - t_flow
    control(split.proxy_ctl, f"reset-every {RESET_EVERY_S}")
    time.sleep(RESETS_FOR_S)
    resets = control(split.proxy_ctl, "reset-every 0", "stats")[1]
    _, err = sweep.communicate(timeout=300)
    assert sweep.returncode == 0, err
    kit.assert_exactly_once(farm, run_id, planned)
    for name in ("cpu@cpu", "gpu@gen1", "gpu@gen2", "interactive@ia"):
        assert _inspect(split.redis_url, name, "active") is not None, f"{name} does not answer after the faults"
    _no_operator_needed(split)
    _cost(kit, farm, run_id, f"worker<->Redis stall {STALL_S}s, then resets every {RESET_EVERY_S}s for "
          f"{RESETS_FOR_S}s", t_stall, planned, err, _llm_calls(split) - calls, rows_after_flow_s=round(flowing_after_s, 1),
          proxy=resets)  # fmt: skip


def _views(farm, endpoint: str) -> dict[str, str]:
    """Each generate worker's view of ``endpoint``, from its heartbeat: its breaker's
    state, or "down" while the worker holds the endpoint out as unhealthy."""
    from qfarm.common import keys
    from qfarm.common import metrics as m

    out = {}
    for name in farm.redis.zrange(keys.WORKERS_KEY, 0, -1):
        beat = {k.decode(): v.decode() for k, v in farm.redis.hgetall(keys.worker_key(name.decode())).items()}
        if beat.get("node", "").startswith("gpu@"):
            prefix = f"breaker{m.SEP}{endpoint}{m.SEP}"
            states = [k[len(prefix):] for k in beat if k.startswith(prefix)]
            down = int(beat.get(f"down{m.SEP}{endpoint}", "0"))
            out[beat["node"]] = "down" if down else states[0] if states else "unknown"
    return out


def test_an_endpoint_host_cut_with_requests_in_flight_fails_over_and_its_breaker_closes_again(
    split, tmp_path, kit
):
    import httpx

    farm = split.hosts.producer_of(split.redis_url)
    sim1, sim2 = split.sims
    net = split.hosts.net
    n = 8
    planned = kit.planned_ids(n)
    before = set(farm.redis.keys("qfarm:run:*:rows"))
    calls = _llm_calls(split)
    sweep = _sweep(farm, tmp_path, n)
    run_id = _run_id(farm, before)
    assert farm.wait_for(lambda: httpx.get(f"{sim2}/sim/stats", timeout=5).json()["running"] > 0,
                         timeout_s=120, poll_s=0.05)  # fmt: skip
    t_cut = net.cut(net.hosts["sim2"])
    # The cut lasts at least ENDPOINT_CUT_S and until a worker took sim2 out of rotation:
    # a new request's refused connection marks it down at once, while the requests in
    # flight fail only at their 10 s timeout, so on a loaded host the fifth consecutive
    # failure a breaker waits for may come after the twelfth second, or never (an
    # endpoint that is down gets no more requests to fail).
    taken_out = farm.wait_for(lambda: {"open", "down"} & set(_views(farm, sim2).values()),
                              timeout_s=3 * ENDPOINT_CUT_S)  # fmt: skip
    time.sleep(max(0.0, t_cut + ENDPOINT_CUT_S - time.time()))
    t_back = net.restore(net.hosts["sim2"])
    closed = farm.wait_for(lambda: set(_views(farm, sim2).values()) == {"closed"}, timeout_s=60)
    closed_after_s = time.time() - t_back
    _, err = sweep.communicate(timeout=300)
    assert sweep.returncode == 0, err
    kit.assert_exactly_once(farm, run_id, planned)
    rows = farm.rows(run_id).values()
    assert [r["error"] for r in rows if r["error"]] == [], "a job failed instead of failing over"
    assert taken_out, ("no generate worker took sim2 out of rotation (breaker open or endpoint "
                       f"down) during the cut: {_views(farm, sim2)}")
    assert closed, f"sim2 did not come back into rotation (breaker closed, endpoint up): {_views(farm, sim2)}"
    _no_operator_needed(split)
    _cost(kit, farm, run_id, f"endpoint host cut {ENDPOINT_CUT_S}s with requests in flight", t_cut, planned, err,
          _llm_calls(split) - calls,
          back_in_rotation_after_return_s=round(closed_after_s, 1),
          rows_by_endpoint={e: sum(r["endpoint"] == e for r in rows) for e in (sim1, sim2)})


def test_the_producer_host_cut_from_redis_waits_reconnects_and_finishes(split, tmp_path, kit):
    hosts, net = split.hosts, split.hosts.net
    farm = hosts.producer_of(split.redis_url)
    prod = net.hosts["prod"]
    n = 4
    planned = kit.planned_ids(n)
    q = tmp_path / "q.txt"
    q.write_text("\n".join(kit.questions) + "\n")
    log = tmp_path / "producer.log"
    before = set(farm.redis.keys("qfarm:run:*:rows"))
    calls = _llm_calls(split)
    proc = net.popen(prod, [str(_bin("qfarm")), "sweep", str(q), "-n", str(n), "--quiet", "--burn"],
                     env=farm.env, log=log, cwd=_repo())  # fmt: skip
    run_id = _run_id(farm, before)
    rows_key = f"qfarm:run:{run_id}:rows"
    assert farm.wait_for(lambda: farm.redis.hlen(rows_key) >= 8, timeout_s=120)
    t_cut = net.cut(prod)
    at_cut = farm.redis.hlen(rows_key)
    time.sleep(PRODUCER_CUT_S)
    worked = farm.redis.hlen(rows_key) - at_cut
    net.restore(prod)
    proc.wait(timeout=300)
    err = log.read_text()
    assert proc.returncode == 0, err
    assert "Redis unreachable" in err and "Redis is back" in err, err
    assert worked > 0, "the workers stopped while the producer was away"
    kit.assert_exactly_once(farm, run_id, planned)
    _cost(kit, farm, run_id, f"producer host cut {PRODUCER_CUT_S}s", t_cut, planned, err, _llm_calls(split) - calls,
          rows_made_while_producer_away=worked)


@pytest.mark.parametrize("fault", ["cut", "lost"])
def test_a_generate_host_cut_or_lost_mid_sweep_has_its_bundles_run_elsewhere_within_the_bound(
    split, tmp_path, kit, fault
):
    """cut: gen1's cable is pulled while it holds bundles and put back once they have rows
    (made by gen2); gen1 then finishes them late, which must change no row.
    lost: gen1 is deleted with its processes (its supervisord included)."""
    net = split.hosts.net
    farm = split.hosts.producer_of(split.redis_url)
    gen1 = split.workers["gen1"]
    n = 6
    planned = kit.planned_ids(n)
    before = set(farm.redis.keys("qfarm:run:*:rows"))
    calls = _llm_calls(split)
    sweep = _sweep(farm, tmp_path, n)
    run_id = _run_id(farm, before)
    rows_key = f"qfarm:run:{run_id}:rows"
    assert farm.wait_for(lambda: bool(_inspect(split.redis_url, "gpu@gen1")) and farm.redis.hlen(rows_key) >= 16,
                         timeout_s=120)  # fmt: skip
    held = _held_jobs(farm, split.redis_url, "gpu@gen1", planned) - set(farm.rows(run_id))
    assert held, "gen1 held no bundle at the fault"
    if fault == "cut":
        t_fault = net.cut(gen1.host)
    else:
        t_fault = time.time()
        net.lose(gen1.host)
    try:
        done = farm.wait_for(lambda: held <= set(farm.rows(run_id)), timeout_s=MAX_CUT_S)
        redelivered_s = time.time() - t_fault
        held_rows = {j: r for j, r in farm.rows(run_id).items() if j in held}
    finally:
        if fault == "cut":
            net.restore(gen1.host)
    assert done, f"gen1's {len(held)} held jobs still have no row {MAX_CUT_S}s after the fault"
    _, err = sweep.communicate(timeout=240)
    assert sweep.returncode == 0, err
    kit.assert_exactly_once(farm, run_id, planned)
    if fault == "cut":
        # gen1 comes back with its bundles and finishes (or gives up) them by itself.
        assert farm.wait_for(lambda: _inspect(split.redis_url, "gpu@gen1") == [], timeout_s=120), \
            gen1.log("gpu")[-3000:]
        time.sleep(3)  # what it forwarded passes the verify stage
        assert {j: r for j, r in farm.rows(run_id).items() if j in held} == held_rows, "a late result changed a row"
        kit.assert_exactly_once(farm, run_id, planned)
    _no_operator_needed(split)
    _cost(kit, farm, run_id, f"generate host {fault} mid-sweep", t_fault, planned, err, _llm_calls(split) - calls,
          held_jobs=len(held), held_jobs_done_elsewhere_after_s=round(redelivered_s, 1))


def _repo():
    from pathlib import Path

    return Path(__file__).resolve().parents[2]


def _bin(name: str):
    from pathlib import Path

    return Path(sys.executable).parent / name
