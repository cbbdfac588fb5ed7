"""Distributed sweeps through real Redis and real `celery worker` processes."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from qfarm.common import keys
from qfarm.common.jobs import make_job_id
from qfarm.common.models import ALL_MODES
from qfarm.common.questions import question_id_for
from qfarm.common.vocab import ExitCode

pytestmark = pytest.mark.slow

QUESTIONS = [
    "Who were the members of the Beatles?",
    "What is the capital of France?",
    "Who painted the Mona Lisa?",
    "What is photosynthesis?",
    "When did World War II end?",
    "Who wrote Hamlet?",
    "What is the largest planet in the solar system?",
    "Who developed the theory of relativity?",
    "What is the Amazon River?",
    "Who was Napoleon Bonaparte?",
    "What is DNA?",
    "Who composed the Ninth Symphony?",
    "What is the Great Wall of China?",
    "Who was Cleopatra?",
    "What is an atom?",
    "Who invented the telephone?",
    "What is the Pacific Ocean?",
    "Who was Mahatma Gandhi?",
    "What is jazz?",
    "What is the Eiffel Tower?",
]


def write_questions(path: Path, questions: list[str] = QUESTIONS) -> Path:
    path.write_text("# distributed test questions\n" + "\n".join(questions) + "\n")
    return path


def expected_ids(questions: list[str], n: int) -> set[str]:
    return {
        make_job_id(question_id_for(q), m, i) for q in questions for m in ALL_MODES for i in range(n)
    }


def run_id_from(text: str) -> str:
    match = re.search(r"run (\S+?):", text)
    assert match, text
    return match.group(1)


def detached_with_a_worker(farm, sweep: list[str], *, worker: str, concurrency: int,
                           rows: int, env: dict[str, str] | None = None) -> tuple[str, Any]:
    """Enqueue a detached sweep, start ``worker``, and wait for ``rows`` rows: (run id, the
    worker's process)."""
    res = farm.qfarm(*sweep, env=env)
    assert res.returncode == 0, res.stderr
    run_id = run_id_from(res.stderr)
    proc = farm.start_worker(worker, concurrency=concurrency)
    assert farm.wait_for(lambda: len(farm.rows(run_id)) >= rows, timeout_s=120)
    return run_id, proc


def kill_9_mid_sweep(farm, sweep: list[str]) -> tuple[str, list[dict], int]:
    """A detached 480-job sweep (``-n 8``): its worker killed with SIGKILL once 40 rows are
    in, a second one started, the run followed with ``--attach``; its rows are exactly one
    a job. (run id, rows, messages unacknowledged when the worker died)."""
    run_id, victim = detached_with_a_worker(farm, [*sweep, "--detach"], worker="victim",
                                            concurrency=8, rows=40)
    farm.kill9(victim)
    in_flight_at_kill = farm.redis.hlen("unacked")
    survivor = farm.start_worker("survivor", concurrency=8)
    assert survivor.poll() is None
    res = farm.qfarm("sweep", "--attach", run_id, "--quiet", timeout_s=400)
    assert res.returncode == 0, res.stderr
    rows = rows_file(farm, run_id)
    ids = [r["job_id"] for r in rows]
    assert len(ids) == len(set(ids)) == 480
    assert set(ids) == expected_ids(QUESTIONS, 8)
    return run_id, rows, in_flight_at_kill


def cancel_once_rows_land(farm, sweep: list[str], *, concurrency: int, rows: int,
                          env: dict[str, str] | None = None) -> tuple[str, int, str]:
    """A detached sweep worked by w1, cancelled once ``rows`` rows have landed: (run id,
    messages the cancel purged, what ``qfarm cancel`` printed)."""
    run_id, _ = detached_with_a_worker(farm, sweep, worker="w1", concurrency=concurrency,
                                       rows=rows, env=env)
    res = farm.qfarm("cancel", run_id)
    assert res.returncode == 0, res.stderr
    return run_id, int(re.search(r"purged (\d+)", res.stdout).group(1)), res.stdout


def rows_file(farm, run_id: str) -> list[dict]:
    path = Path(farm.env["QFARM_RESULTS_DIR"]) / run_id / "rows.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_sweep_of_hundreds_of_jobs_gives_exactly_one_row_each(farm, tmp_path):
    qfile = write_questions(tmp_path / "q.txt")
    farm.start_worker("w1")
    res = farm.qfarm("sweep", str(qfile), "-n", "5", "--quiet")
    assert res.returncode == 0, res.stderr
    run_id = run_id_from(res.stderr)
    rows = rows_file(farm, run_id)
    ids = [r["job_id"] for r in rows]
    assert len(ids) == 300 == len(set(ids))
    assert set(ids) == expected_ids(QUESTIONS, 5)
    assert set(farm.rows(run_id)) == set(ids)
    assert all(r["error"] is None for r in rows), [r["error"] for r in rows if r["error"]][:3]
    assert {r["verdict"] for r in rows} <= {"STRICT", "HYBRID", "UNGROUNDED"}
    summary = (Path(farm.env["QFARM_RESULTS_DIR"]) / run_id / "summary.md").read_text()
    assert "SIMULATED" in summary  # the producer recognised the simulator behind the URL
    assert all(r["simulated"] for r in rows)


def test_kill_9_of_a_worker_mid_sweep_loses_and_duplicates_nothing(farm, tmp_path):
    qfile = write_questions(tmp_path / "q.txt")
    _, _, in_flight_at_kill = kill_9_mid_sweep(farm, ["sweep", str(qfile), "-n", "8", "--quiet"])
    # The kill really left work behind: messages were unacknowledged when it died.
    assert in_flight_at_kill > 0


def test_a_task_delivered_twice_writes_one_row(farm, tmp_path):
    from qfarm.common.policy import Policy
    from qfarm.common.settings import Settings
    from qfarm.producer.runs.sweep import enqueue_jobs, make_manifest
    from qfarm.producer.store import ProducerStore
    from qfarm.worker.celery import configure_app

    settings = Settings(redis_url=farm.env["QFARM_REDIS_URL"])
    app = configure_app(settings)
    store = ProducerStore(farm.redis)
    from qfarm.common.jobs import expand_jobs
    from qfarm.common.models import Mode, Question

    q = Question(id="dup", text="Who were the members of the Beatles?")
    manifest = make_manifest(
        run_id="dup-run", question_file="<test>", question_file_digest="x", n_questions=1,
        modes=[Mode.QUOTE], n=1, policy=Policy(), model=settings.model, endpoints=[],
        simulated=True, retriever="embedded", index_version=None, corpus=None, eager=False,
    )
    store.put_manifest(manifest)
    job = next(iter(expand_jobs("dup-run", [q], [Mode.QUOTE], 1, Policy(), model=settings.model)))
    # The same message twice, as a redelivery after a lost ack would produce.
    assert enqueue_jobs(app, [job, job]) == 2
    farm.start_worker("w1", concurrency=2)
    assert farm.wait_for(lambda: farm.redis.llen("retrieve") == 0 and len(farm.rows("dup-run")) == 1)
    time.sleep(2.0)
    assert len(farm.rows("dup-run")) == 1
    assert farm.redis.llen("qfarm:run:dup-run:log") == 1


def test_resume_after_the_queue_is_lost_finishes_exactly_the_missing_jobs(farm, tmp_path):
    from qfarm.ops.sim.launch import start_simulator

    # Answers take 50 ms + 5 ms a token and bundles are 8 jobs: against a zero-latency
    # simulator the farm finished all its jobs before the kill, leaving nothing to lose.
    with start_simulator(ttft_ms=50, tpot_ms=5, max_num_seqs=256) as sim:
        farm.env.update(QFARM_LLM_ENDPOINTS=sim.url, QFARM_BUNDLE_SIZE="8")
        qfile = write_questions(tmp_path / "q.txt")
        res = farm.qfarm("sweep", str(qfile), "-n", "8", "--detach", "--quiet")
        assert res.returncode == 0, res.stderr
        run_id = run_id_from(res.stderr)
        total = 8 * len(QUESTIONS) * len(ALL_MODES)
        worker = farm.start_worker("w1", concurrency=4)
        assert farm.wait_for(lambda: len(farm.rows(run_id)) >= 40, timeout_s=120)
        farm.kill9(worker)
        # Redis "restarted" without its queues: every pending and unacked message is gone.
        farm.redis.delete("retrieve", "generate", "verify", "unacked", "unacked_index")
        have = set(farm.rows(run_id))
        assert 0 < len(have) < total, "the run ended before the fault: make it longer"
        farm.start_worker("w2", concurrency=8)
        res = farm.qfarm("sweep", "--resume", run_id, "--quiet", timeout_s=400)
        assert res.returncode == 0, res.stderr
        assert f"re-enqueued {total - len(have)} jobs" in res.stderr
        ids = [r["job_id"] for r in rows_file(farm, run_id)]
        assert len(ids) == len(set(ids)) == total
        assert set(ids) == expected_ids(QUESTIONS, 8)


def test_cancel_stops_a_run(farm, tmp_path):
    qfile = write_questions(tmp_path / "q.txt")
    # 6,000 jobs in bundles of 8 (750 messages), not 600 in the default 32: the cancel must
    # find messages still queued once the first rows are in, and on a zero-latency simulator
    # two worker threads finished 600 jobs before a loaded host had started `qfarm cancel`.
    run_id, purged, _ = cancel_once_rows_land(
        farm, ["sweep", str(qfile), "-n", "100", "--detach", "--quiet"], concurrency=2,
        rows=10, env={**farm.env, "QFARM_BUNDLE_SIZE": "8"})
    assert purged > 0
    # Let the jobs already past their cancel check finish, then nothing more may land.
    assert farm.wait_for(lambda: farm.redis.llen("retrieve") == 0, timeout_s=30)
    # Jobs past their cancel check may take a while to land on a loaded host: wait until
    # the count holds still for 3 s, then it must not move again.
    settled, deadline = len(farm.rows(run_id)), time.monotonic() + 90
    while time.monotonic() < deadline:
        time.sleep(3.0)
        now = len(farm.rows(run_id))
        if now == settled:
            break
        settled = now
    time.sleep(4.0)
    assert len(farm.rows(run_id)) == settled < 6000
    res = farm.qfarm("sweep", "--attach", run_id, "--quiet", timeout_s=120)
    assert res.returncode == ExitCode.FAILED, res.stderr  # a cancelled run exits 1
    assert "was cancelled" in res.stderr
    summary = (Path(farm.env["QFARM_RESULTS_DIR"]) / run_id / "summary.md").read_text()
    assert f"Run cancelled: {6000 - settled} of 6000 jobs were cancelled" in summary


def test_a_pickled_message_is_refused(farm):
    from kombu import Connection

    farm.start_worker("w1", concurrency=2)
    with Connection(farm.env["QFARM_REDIS_URL"]) as conn:
        producer = conn.Producer(serializer="pickle")
        producer.publish(
            [[{"run_id": "pickle-run", "qid": "q", "q": "x", "mode": "quote"}], {}, {}],
            routing_key="interactive",
            headers={"task": "qfarm.run_job", "id": "pickled-1", "lang": "py"},
            declare=[],
        )
    assert farm.wait_for(lambda: "ContentDisallowed" in farm.worker_log("w1")
                         or "Refusing to deserialize" in farm.worker_log("w1"), timeout_s=30)
    assert farm.rows("pickle-run") == {}


def test_ask_goes_through_the_interactive_queue(farm):
    farm.start_worker("inter", queues="interactive", concurrency=2)
    res = farm.qfarm("ask", "Who were the members of the Beatles?", "--mode", "quote", "--json")
    assert res.returncode in (0, 1), res.stderr
    row = json.loads(res.stdout)
    assert row["mode"] == "quote" and row["run_id"].startswith("ask-")
    assert row["worker"] and row["worker"] != "eager"


def test_ask_without_an_interactive_worker_fails_clearly(farm):
    res = farm.qfarm("ask", "What is jazz?", timeout_s=60)
    assert res.returncode != 0
    assert "no worker is consuming the interactive queue" in res.stderr
    assert farm.redis.llen("interactive") == 0


def test_a_sweep_no_worker_consumes_warns_stops_after_the_bound_and_loses_nothing(farm, tmp_path):
    qfile = write_questions(tmp_path / "q.txt", QUESTIONS[:2])
    farm.start_worker("cpu", queues="retrieve,verify", concurrency=2)  # no generate worker
    res = farm.qfarm("sweep", str(qfile), "-n", "1", "--quiet", "--wait-for-workers", "3",
                     timeout_s=120)
    assert res.returncode == ExitCode.FAILED, res.stderr
    run_id = run_id_from(res.stderr)
    warning = next(line for line in res.stderr.splitlines() if "warning:" in line)
    assert "no worker consumes the queue generate," in warning
    assert "celery -A qfarm.worker worker -Q generate -P threads" in warning
    assert "no worker consumed the queue generate for" in res.stderr
    assert f"qfarm sweep --attach {run_id}" in res.stderr and "nothing is lost" in res.stderr
    status = json.loads((Path(farm.env["QFARM_RESULTS_DIR"]) / run_id / "status.json").read_text())
    assert status["status"] == "stopped: no worker" and status["unconsumed_queues"] == ["generate"]
    assert farm.redis.llen("generate") == 1  # the jobs wait in their queue
    # A worker started later runs them, and --attach drains their rows: nothing was lost.
    farm.start_worker("gpu", queues="generate", concurrency=2)
    res = farm.qfarm("sweep", "--attach", run_id, "--quiet", timeout_s=120)
    assert res.returncode == 0, res.stderr
    assert {r["job_id"] for r in rows_file(farm, run_id)} == expected_ids(QUESTIONS[:2], 1)


def test_a_sweep_with_no_worker_at_all_names_the_three_queues_and_exits_1(farm, tmp_path):
    qfile = write_questions(tmp_path / "q.txt", QUESTIONS[:1])
    res = farm.qfarm("sweep", str(qfile), "-n", "1", "--quiet", "--json", "--wait-for-workers",
                     "2", timeout_s=120)
    assert res.returncode == ExitCode.FAILED, res.stderr
    assert "no worker consumes the queues retrieve, generate, verify" in res.stderr
    outcome = json.loads(res.stdout.splitlines()[-1])
    assert (outcome["status"], outcome["exit_code"], outcome["rows"]) == ("stopped: no worker", 1, 0)
    assert farm.redis.llen("retrieve") == 1  # its one bundle, still queued


def test_doctor_names_each_worker_with_its_role_and_the_queues_without_one(farm):
    from qfarm.common.settings import Settings
    from qfarm.producer.farm.doctor import check_workers

    farm.start_worker("cpu", queues="retrieve,verify", concurrency=2)
    check = check_workers(Settings(redis_url=farm.env["QFARM_REDIS_URL"]), farm.redis, 1.0)
    assert check.health == "warn" and check.data["missing"] == ["interactive", "generate"]
    assert [d.split("@")[0] + d.partition(" ")[2] for d in check.details] == [
        "cpu(cpu): retrieve, verify"]
    assert check.fix.splitlines()[1:] == [
        "celery -A qfarm.worker worker -Q generate -P threads -c 16 -n gpu@%h --without-gossip "
        "--without-mingle",
        "celery -A qfarm.worker worker -Q interactive -P threads -c 8 -n interactive@%h "
        "--without-gossip --without-mingle"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sweep", "missing.txt"], "no such question file"),
        (["sweep", "{q}", "--modes", "quote,bogus"], "unknown mode 'bogus'"),
        (["sweep", "{q}", "--policy", "top_kk=3"], "unknown policy key"),
        (["sweep", "{q}", "--policy", "top_k=many"], "top_k"),
        (["sweep", "{bad}"], ":2: malformed JSON"),
        (["sweep", "{empty}"], "no questions found"),
    ],
)
def test_bad_input_enqueues_nothing(farm, tmp_path, args, message):
    files = {
        "q": write_questions(tmp_path / "q.txt"),
        "bad": tmp_path / "bad.jsonl",
        "empty": tmp_path / "empty.txt",
    }
    files["bad"].write_text('{"id": "a", "question": "What is jazz?"}\n{"id": "b", "question": \n')
    files["empty"].write_text("# nothing here\n\n")
    res = farm.qfarm(*[a.format(**files) for a in args])
    assert res.returncode != 0
    assert message in res.stderr and res.stderr.count("\n") <= 2, res.stderr
    assert farm.redis.llen("retrieve") == 0
    assert not farm.redis.exists("qfarm:runs")
    assert not (Path(farm.env["QFARM_RESULTS_DIR"])).exists()


def test_unreachable_redis_is_a_clear_error(farm, tmp_path, unused_port):
    qfile = write_questions(tmp_path / "q.txt")
    env = dict(farm.env, QFARM_REDIS_URL=f"redis://:secret@127.0.0.1:{unused_port}/0")
    res = farm.qfarm("sweep", str(qfile), env=env, timeout_s=60)
    assert res.returncode != 0
    assert f"cannot reach Redis at redis://:***@127.0.0.1:{unused_port}/0" in res.stderr
    assert "secret" not in res.stderr
    assert not Path(farm.env["QFARM_RESULTS_DIR"]).exists()


def test_result_cache_is_shared_across_runs_and_burn_bypasses_it(farm, tmp_path):
    qfile = write_questions(tmp_path / "q.txt", QUESTIONS[:5])
    farm.start_worker("w1")
    runs = []
    for extra in ([], [], ["--burn"]):
        res = farm.qfarm("sweep", str(qfile), "-n", "2", "--quiet", *extra)
        assert res.returncode == 0, res.stderr
        runs.append({r["job_id"]: r for r in rows_file(farm, run_id_from(res.stderr))})
    first, second, burned = runs
    assert len(first) == 30 and not any(r["cache_hit"] for r in first.values())
    assert all(r["cache_hit"] for r in second.values())
    assert all(second[j]["verdict"] == first[j]["verdict"] for j in first)
    assert all(second[j]["answerability"] is None for j in first)
    assert not any(r["cache_hit"] for r in burned.values())
    # A different policy is a different governance hash: no hit.
    res = farm.qfarm("sweep", str(qfile), "-n", "2", "--quiet", "--policy", "top_k=4")
    assert res.returncode == 0, res.stderr
    assert not any(r["cache_hit"] for r in rows_file(farm, run_id_from(res.stderr)))


def _completions(url: str) -> int:
    import httpx

    log = httpx.get(f"{url}/sim/stats", timeout=5.0).json()["requests"]
    return sum(1 for r in log if "completions" in r["path"])


def test_response_cache_is_shared_by_workers_and_only_with_cache(farm, tmp_path):
    """Two worker processes, one Redis: replies one stored answer the other's requests; a
    run without --cache neither reads nor writes them."""
    qfile = write_questions(tmp_path / "q.txt", QUESTIONS[:4])
    farm.start_worker("w1", concurrency=2)
    farm.start_worker("w2", concurrency=2)
    url = farm.env["QFARM_LLM_ENDPOINTS"]
    runs, asked = [], []
    for extra in (["--cache"], ["--cache"], []):
        before = _completions(url)
        # --burn: the result cache would otherwise re-issue the first run's rows whole.
        res = farm.qfarm("sweep", str(qfile), "-n", "2", "--quiet", "--burn", *extra)
        assert res.returncode == 0, res.stderr
        asked.append(_completions(url) - before)
        runs.append({r["job_id"]: r for r in rows_file(farm, run_id_from(res.stderr))})
    first, second, plain = runs
    assert asked == [24, 0, 24]
    assert {r["response_cache_hit"] for r in first.values()} == {False}
    assert {r["response_cache_hit"] for r in second.values()} == {True}
    assert all(second[j]["verdict"] == first[j]["verdict"] for j in first)
    assert not any("response_cache_hit" in r for r in plain.values())
    assert len(list(farm.redis.scan_iter(match=keys.RESPONSE_CACHE_PATTERN))) == 24


def test_status_shows_runs_queues_and_workers(farm, tmp_path):
    qfile = write_questions(tmp_path / "q.txt", QUESTIONS[:2])
    res = farm.qfarm("sweep", str(qfile), "-n", "1", "--detach", "--quiet")
    run_id = run_id_from(res.stderr)
    farm.start_worker("w1", queues="generate", concurrency=2)
    res = farm.qfarm("status", run_id)
    assert res.returncode == 0, res.stderr
    assert f"{run_id}  running   0/6 rows" in res.stdout
    assert "queued messages: interactive=0  retrieve=1 " in res.stdout  # one bundle of 6 jobs
    assert "worker w1@" in res.stdout and ": generate" in res.stdout
    res = farm.qfarm("status", "no-such-run")
    assert res.returncode == 2 and "run no-such-run: not found" in res.stderr


def _stage_sum(row: dict) -> float:
    t = row["timings"]
    return sum(t.get(k) or 0.0 for k in ("retrieval_ms", "llm_ms", "verify_ms"))


def test_rows_of_a_bundle_carry_their_own_timings_in_both_modes(farm, tmp_path):
    from qfarm.ops.sim.launch import start_simulator

    qfile = write_questions(tmp_path / "q.txt", QUESTIONS[:5])
    # A latency per token, so answers of different lengths take different times, and a
    # server of 4 sequences, so a bundle's 10 requests queue: its wall time is far from
    # any one job's.
    with start_simulator(ttft_ms=20, tpot_ms=2, max_num_seqs=4) as sim:
        farm.env.update(QFARM_LLM_ENDPOINTS=sim.url, QFARM_BUNDLE_SIZE="10")
        farm.start_worker("w1", concurrency=2)
        res = farm.qfarm("sweep", str(qfile), "-n", "2", "--quiet", "--burn")
        assert res.returncode == 0, res.stderr
        farm_id = run_id_from(res.stderr)
        farm_rows = rows_file(farm, farm_id)
        res = farm.qfarm("sweep", str(qfile), "-n", "2", "--quiet", "--burn", "--eager")
        assert res.returncode == 0, res.stderr
        (eager_id,) = {p.name for p in Path(farm.env["QFARM_RESULTS_DIR"]).iterdir()} - {farm_id}
        eager_rows = rows_file(farm, eager_id)
    p50 = {}
    for name, rows in (("distributed", farm_rows), ("eager", eager_rows)):
        assert len(rows) == 30 and all(r["error"] is None for r in rows)
        for r in rows:
            # total_ms is the job's own stages, not the span from its first stage to its row.
            assert r["timings"]["total_ms"] == pytest.approx(_stage_sum(r), abs=0.01)
            assert r["timings"]["llm_ms"] > 0
        totals = sorted(r["timings"]["total_ms"] for r in rows)
        llm = [r["timings"]["llm_ms"] for r in rows]
        # Each job its own: hardly two rows share a value (a bundle's rows all did).
        assert len(set(totals)) >= 25 and len(set(llm)) >= 25
        p50[name] = totals[len(totals) // 2]
    # On the farm a job's wall span (first stage to row) includes queue waits and its
    # bundle-mates: some rows' spans are much longer than their own work.
    spans = [(r["finished_at"] - r["started_at"]) * 1000 - r["timings"]["total_ms"]
             for r in farm_rows]
    assert max(spans) > 0
    print(f"p50 total_ms distributed {p50['distributed']:.0f} ms, eager {p50['eager']:.0f} ms "
          f"(ratio {p50['distributed'] / p50['eager']:.2f}; SIMULATED, shared machine)")


def test_cancel_mid_run_accounts_every_job_and_counts_add_up(farm, tmp_path):
    from qfarm.ops.sim.launch import start_simulator

    qfile = write_questions(tmp_path / "q.txt")
    total = 4 * len(QUESTIONS) * len(ALL_MODES)  # 240
    # A slow server and 2 requests in flight per worker process: each taken bundle of 8
    # has most of its requests waiting in the gateway when the cancel comes.
    with start_simulator(ttft_ms=150, tpot_ms=4, max_num_seqs=4) as sim:
        farm.env.update(QFARM_LLM_ENDPOINTS=sim.url, QFARM_BUNDLE_SIZE="8",
                        QFARM_LLM_MAX_INFLIGHT_PER_ENDPOINT="2")
        run_id, first, said = cancel_once_rows_land(
            farm, ["sweep", str(qfile), "-n", "4", "--detach", "--quiet", "--burn"],
            concurrency=4, rows=6)
        assert first > 0 and "what a cancel stops:" in said

        def accounted() -> int:
            return len(farm.rows(run_id)) + farm.redis.scard(f"qfarm:run:{run_id}:cancelled_jobs")

        assert farm.wait_for(lambda: accounted() == total, timeout_s=90), (
            len(farm.rows(run_id)), accounted())
        time.sleep(2.0)
        rows = len(farm.rows(run_id))
        assert accounted() == total and rows < total
        print(f"cancel: {rows} rows + {total - rows} cancelled = {total}; "
              f"{first} messages purged")
        # Taken bundles stopped between their jobs: unanswered requests were abandoned.
        assert "abandoned" in farm.worker_log("w1")
        res = farm.qfarm("cancel", run_id)
        assert res.returncode == 0, res.stderr
        assert "cancel #2" in res.stdout and f"{first} purged in all" in res.stdout
        status = json.loads(
            (Path(farm.env["QFARM_RESULTS_DIR"]) / run_id / "status.json").read_text())
        assert status["purged_messages"] == first and status["cancels"] == 2
        assert status["cancelled_jobs"] == total - rows
        assert status["last_cancelled_at"] > status["cancelled_at"]
        res = farm.qfarm("sweep", "--attach", run_id, "--quiet", timeout_s=120)
        assert res.returncode == ExitCode.FAILED, res.stderr  # a cancelled run exits 1
    summary = (Path(farm.env["QFARM_RESULTS_DIR"]) / run_id / "summary.md").read_text()
    assert f"The farm counted {total - rows} cancelled jobs" in summary
    assert "rows + cancelled = planned" in summary


def test_shared_samples_survive_a_kill_9_with_one_row_each_and_the_eager_answers(farm, tmp_path):
    """With --share-samples a generate task holds requests of n choices; a worker killed
    mid-sweep leaves bundles whose groups may be half written. After redelivery every job
    has exactly one row, and each answer is the one an eager run of the same sweep gives
    (a regrouped remainder asks with the seeds its samples always had)."""
    qfile = write_questions(tmp_path / "q.txt")
    args = ("sweep", str(qfile), "-n", "8", "--share-samples", "--keep-answers", "--quiet")
    run_id, rows, in_flight_at_kill = kill_9_mid_sweep(farm, list(args))
    assert all(r["error"] is None for r in rows)
    assert max(r["llm_request"]["prompts"] for r in rows) == 8  # samples answered together
    assert in_flight_at_kill > 0  # the kill really left work behind
    res = farm.qfarm(*args, "--eager")
    assert res.returncode == 0, res.stderr
    paths = dict(line.split(":", 1) for line in res.stdout.strip().splitlines())
    eager_rows = Path(paths["rows"].split("(")[0].strip()).read_text().splitlines()
    eager = [json.loads(line) for line in eager_rows]
    assert {r["job_id"]: r["answer"] for r in rows} == {r["job_id"]: r["answer"] for r in eager}
