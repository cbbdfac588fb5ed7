"""``--retry-errors``: an endpoint dies for part of a run; the retry re-runs exactly the
jobs whose row is an error, in the same run, and every job keeps exactly one row."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import httpx
import pytest

from qfarm.common.errors import InputError
from qfarm.common.policy import build_policy
from qfarm.common.vocab import ExitCode
from qfarm.ops.sim.launch import start_simulator
from qfarm.producer import SweepSpec, run_sweep
from qfarm.producer.api import QuestionSet, retry_errors
from qfarm.producer.reports.record import verify_run

QUESTIONS = [f"What is {w}?" for w in
             ["jazz", "Paris", "the Moon", "Hamlet", "iron", "Mars", "tea", "Rome"]]


def completions(url: str) -> int:
    """Prompts the simulator answered (its vLLM success counter)."""
    text = httpx.get(f"{url}/metrics").text
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
               if line.startswith("vllm:request_success_total"))


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def eager_run(eager_endpoints):
    """An eager run whose endpoint dies after four rows: the rest are error rows."""
    settings, endpoints, urls, sim = eager_endpoints

    def kill_after_four(prog) -> None:
        if prog.done >= 4 and sim.proc.poll() is None:
            sim.stop()

    result = run_sweep(SweepSpec(questions=QUESTIONS, modes=["quote"]), eager=True, serial=True,
                       settings=settings, endpoints=endpoints, on_progress=kill_after_four)
    return result, settings, endpoints, urls


def test_an_eager_retry_reruns_only_the_error_rows_in_the_same_run(eager_run):
    first, settings, endpoints, urls = eager_run
    before = lines(first.rows_path)
    errors = {r["job_id"] for r in before if r["error"]}
    assert 0 < len(errors) < len(before) == 8
    sim = start_simulator(ttft_ms=0, tpot_ms=0)
    try:
        urls[:] = [sim.url]
        result = retry_errors(first.run_id, settings=settings, endpoints=endpoints,
                              questions=QuestionSet.from_texts(QUESTIONS))
        assert completions(sim.url) == len(errors)  # nothing that succeeded ran again
    finally:
        sim.stop()
    after = lines(result.rows_path)
    assert result.run_id == first.run_id and result.status == "complete"
    assert Counter(r["job_id"] for r in after) == Counter(r["job_id"] for r in before)
    for old, new in zip(before, after, strict=True):  # same order; successes untouched
        if old["job_id"] in errors:
            assert new["error"] is None and new["retried_errors"] == ["llm"]
        else:
            assert new == old
    summary = result.summary.read_text()
    assert f"{len(errors)} row(s) came from `--retry-errors`" in summary
    # The record is written anew: the rewritten files verify.
    assert [c for c in verify_run(result.run_dir) if c.ok is False] == []
    assert json.loads((result.run_dir / "status.json").read_text())["retries"][0]["replaced"] \
        == len(errors)
    # Nothing left to retry: a second retry runs nothing and changes no row.
    again = retry_errors(first.run_id, settings=settings, endpoints=endpoints,
                         questions=QuestionSet.from_texts(QUESTIONS))
    assert lines(again.rows_path) == after


def test_an_error_again_stays_an_error_row_and_a_second_retry_tries_again(eager_run):
    first, settings, endpoints, urls = eager_run
    errors = {r["job_id"] for r in lines(first.rows_path) if r["error"]}
    questions = QuestionSet.from_texts(QUESTIONS)
    retry_errors(first.run_id, settings=settings, endpoints=endpoints, questions=questions)
    rows = {r["job_id"]: r for r in lines(first.rows_path)}
    assert all(rows[j]["error"] and rows[j]["retried_errors"] == ["llm"] for j in errors)
    sim = start_simulator(ttft_ms=0, tpot_ms=0)
    try:
        urls[:] = [sim.url]
        retry_errors(first.run_id, settings=settings, endpoints=endpoints, questions=questions)
    finally:
        sim.stop()
    rows = {r["job_id"]: r for r in lines(first.rows_path)}
    assert len(rows) == 8 and not any(r["error"] for r in rows.values())
    assert all(rows[j]["retried_errors"] == ["llm", "llm"] for j in errors)


def test_a_retry_under_another_policy_model_or_question_set_is_refused(eager_run):
    first, settings, endpoints, _ = eager_run
    questions = QuestionSet.from_texts(QUESTIONS)
    with pytest.raises(InputError, match="policy given differs from the run's"):
        retry_errors(first.run_id, settings=settings, endpoints=endpoints, questions=questions,
                     policy=build_policy({"top_k": 3}))
    with pytest.raises(InputError, match="QFARM_MODEL is 'other'"):
        retry_errors(first.run_id, settings=settings.model_copy(update={"model": "other"}),
                     endpoints=endpoints, questions=questions)
    with pytest.raises(InputError, match="changed since run"):
        retry_errors(first.run_id, settings=settings, endpoints=endpoints,
                     questions=QuestionSet.from_texts(QUESTIONS[:-1]))
    with pytest.raises(InputError, match="retry its errors with the same"):
        run_sweep(SweepSpec(questions=QUESTIONS, modes=["claim_lattice"]), eager=True,
                  settings=settings, endpoints=endpoints, retry_errors=first.run_id)


def test_a_retry_or_resume_where_the_questions_read_differently_is_refused(eager_run, monkeypatch):
    """A qfarm whose classifier reads the run's questions differently from the one that
    planned it (here: its version moved) adds no rows to the run."""
    from qfarm.common.grounding import preflight
    from qfarm.producer.api import resume_eager

    first, settings, endpoints, urls = eager_run
    source = settings.results_dir.parent / "questions.txt"
    source.write_text("\n".join(QUESTIONS) + "\n")
    sim = start_simulator(ttft_ms=0, tpot_ms=0)
    try:
        urls[:] = [sim.url]
        from_file = run_sweep(SweepSpec(questions=source, modes=["quote"]), eager=True,
                              settings=settings, endpoints=endpoints)
    finally:
        sim.stop()
    rows = from_file.rows_path.read_text().splitlines()
    from_file.rows_path.write_text("\n".join(rows[1:]) + "\n")  # one job to resume
    monkeypatch.setattr(preflight.versions, "CLASSIFIER_VERSION", "quantifier-changed")
    with pytest.raises(InputError, match="planned with preflight .*; retry its errors with"):
        retry_errors(first.run_id, settings=settings, endpoints=endpoints,
                     questions=QuestionSet.from_texts(QUESTIONS))
    with pytest.raises(InputError, match="planned with preflight .*; resume it with"):
        resume_eager(from_file.run_id, settings=settings, endpoints=endpoints)
    assert from_file.rows_path.read_text().splitlines() == rows[1:]  # nothing was added


@pytest.mark.slow
def test_a_distributed_retry_after_an_endpoint_died_leaves_one_row_per_job(farm, tmp_path):
    questions = tmp_path / "q.txt"
    questions.write_text("\n".join(QUESTIONS + ["What is gold?", "Who was Kant?"]) + "\n")
    dying = start_simulator(ttft_ms=150, tpot_ms=0)
    farm.env.update(QFARM_LLM_ENDPOINTS=dying.url, QFARM_LLM_MAX_ATTEMPTS="1",
                    QFARM_LLM_WAIT_FOR_ENDPOINT_S="0", QFARM_LLM_BREAKER_FAILURES="1000",
                    QFARM_BUNDLE_SIZE="1")
    try:
        farm.start_worker("w1", concurrency=1)
        out = farm.qfarm("sweep", str(questions), "--modes", "quote", "--detach", "--quiet")
        assert out.returncode == 0, out.stderr
        run_id = next((tmp_path / "results").iterdir()).name
        # Three answered rows, not any three: on a loaded host the first jobs can fail too
        # (one attempt, no wait for the endpoint), and the retry needs successes to leave.
        assert farm.wait_for(
            lambda: sum(1 for r in farm.rows(run_id).values() if not r["error"]) >= 3,
            poll_s=0.02,
        )
    finally:
        dying.stop()
    out = farm.qfarm("sweep", "--attach", run_id, "--quiet")
    assert out.returncode == ExitCode.ROW_ERRORS, out.stderr  # completed with error rows
    rows_path = tmp_path / "results" / run_id / "rows.jsonl"
    before = lines(rows_path)
    errors = {r["job_id"] for r in before if r["error"]}
    assert 0 < len(errors) < len(before) == 10
    farm.stop_all()
    sim = start_simulator(ttft_ms=0, tpot_ms=0)
    try:
        farm.env["QFARM_LLM_ENDPOINTS"] = sim.url
        farm.start_worker("w2", concurrency=4)
        out = farm.qfarm("sweep", "--retry-errors", run_id, "--quiet")
        assert out.returncode == 0, out.stderr
        assert completions(sim.url) == len(errors)  # no success was sent again
    finally:
        sim.stop()
    after = lines(rows_path)
    assert [r["job_id"] for r in after] == [r["job_id"] for r in before]
    for old, new in zip(before, after, strict=True):
        assert new == old if old["job_id"] not in errors else (
            new["error"] is None and new["retried_errors"] == ["llm"])
    assert len(farm.rows(run_id)) == 10
    assert not any(r["error"] for r in farm.rows(run_id).values())
    assert int(farm.redis.get(f"qfarm:run:{run_id}:failed") or 0) == 0
    assert not (tmp_path / "results" / run_id / "retry.jsonl").exists()


def test_a_run_without_a_question_file_is_retried_from_its_error_rows(eager_run):
    first, settings, endpoints, urls = eager_run
    errors = {r["job_id"] for r in lines(first.rows_path) if r["error"]}
    sim = start_simulator(ttft_ms=0, tpot_ms=0)
    try:
        urls[:] = [sim.url]
        result = retry_errors(first.run_id, settings=settings, endpoints=endpoints)
        assert completions(sim.url) == len(errors)
    finally:
        sim.stop()
    rows = lines(result.rows_path)
    assert len(rows) == 8 and not any(r["error"] for r in rows)


def test_a_distributed_retry_is_followed_by_the_runs_follower(tmp_path):
    """--retry-errors on the farm goes through producer/runs/sweep.py's Follower: a message lost
    is sent again, and a run Redis lost mid-retry is healed (manifest and the retry's rows
    put back) before the job still missing is sent again."""
    from types import SimpleNamespace

    import fakeredis

    from qfarm.common import keys
    from qfarm.producer.runs.lease import FollowerLease
    from qfarm.producer.runs.retry import RETRY_ROWS, ROWS, RetryPlan, follow_retry
    from qfarm.producer.store import ProducerStore
    from tests.producer.runs.test_following import a_manifest

    store = ProducerStore(fakeredis.FakeRedis())
    manifest = a_manifest("r", 3)
    (tmp_path / ROWS).write_text("".join(
        json.dumps({"run_id": "r", "job_id": j, "error": e}) + "\n"
        for j, e in (("a", None), ("b", "llm down"), ("c", "llm down"))))
    jobs = [SimpleNamespace(job_id=j, attempt=1) for j in ("b", "c")]
    plan = RetryPlan(manifest=manifest, run_dir=tmp_path, jobs=jobs)  # type: ignore[arg-type]
    write_row = store.client.register_script(keys.WRITE_ROW_LUA)

    def land(job_id: str) -> None:  # a worker's row write of attempt 1
        row = json.dumps({"run_id": "r", "job_id": job_id, "error": None, "retried_errors": ["llm"]})
        write_row(keys=[keys.rows_key("r"), keys.log_key("r"), keys.failed_key("r"),
                        keys.VERIFY.counter_key("r")], args=[job_id, row, "0", 0, 1])

    sent: list[list[str]] = []

    def send(batch) -> int:
        sent.append([j.job_id for j in batch])
        if len(sent) == 1:
            land("b")  # c's message is lost
        elif len(sent) == 2:
            store.client.flushall()  # and then Redis restarts without persistence
        else:
            for job in batch:
                land(job.job_id)
        return len(batch)

    said: list[str] = []
    done = follow_retry(plan, store, FollowerLease(store.client, "r"), send, None, said.append,
                        reconnect_s=5, poll_s=0.01, stall_s=0.05)
    assert done and sent == [["b", "c"], ["c"], ["c"]]
    assert [json.loads(line)["job_id"] for line in (tmp_path / RETRY_ROWS).read_text().splitlines()] == ["b", "c"]
    assert any("sent them again" in s for s in said)
    assert any("Redis had lost this run" in s for s in said)
    assert store.manifest("r") == manifest


def test_a_second_retry_of_a_run_is_refused_while_one_runs(eager_run):
    """Two retries of one run: the second would merge and delete the first's retry.jsonl
    while it is written, and the first would wait forever for rows that went with it."""
    from qfarm.producer.runs.retry import RETRY_ROWS, one_retry_at_a_time

    first, settings, endpoints, _ = eager_run
    in_progress = first.run_dir / RETRY_ROWS
    in_progress.write_text('{"job_id": "a row the running retry wrote"}\n')
    with one_retry_at_a_time(first.run_dir, first.run_id):  # the first retry, still running
        with pytest.raises(InputError, match=r"is being retried already \(pid \d+ on "):
            retry_errors(first.run_id, settings=settings, endpoints=endpoints,
                         questions=QuestionSet.from_texts(QUESTIONS))
    assert in_progress.read_text().startswith('{"job_id": "a row the running retry wrote"}')


def test_a_distributed_retry_no_worker_consumes_stops_after_the_bound_and_says_so(tmp_path):
    from types import SimpleNamespace

    import fakeredis

    from qfarm.common.errors import ServiceError
    from qfarm.producer.runs.lease import FollowerLease
    from qfarm.producer.runs.retry import ROWS, RetryPlan, follow_retry
    from qfarm.producer.store import ProducerStore
    from tests.producer.runs.test_following import a_manifest

    store = ProducerStore(fakeredis.FakeRedis())
    manifest = a_manifest("r", 2)
    (tmp_path / ROWS).write_text(json.dumps({"run_id": "r", "job_id": "a", "error": "llm down"}) + "\n")
    plan = RetryPlan(manifest=manifest, run_dir=tmp_path,  # type: ignore[arg-type]
                     jobs=[SimpleNamespace(job_id="a", attempt=1)])
    said: list[str] = []
    watch = {"unconsumed": lambda: ["generate"], "wait_for_workers_s": 0.2,
             "consumer_check_s": 0.01, "worker_hint": lambda qs: "celery ... -Q generate"}
    with pytest.raises(ServiceError, match=r"no worker consumed the queue generate for .*"
                                           r"qfarm sweep --retry-errors r goes on"):
        follow_retry(plan, store, FollowerLease(store.client, "r"), len, None, said.append,
                     reconnect_s=5, poll_s=0.01, watch=watch)
    assert any("no worker consumes the queue generate" in s for s in said)
