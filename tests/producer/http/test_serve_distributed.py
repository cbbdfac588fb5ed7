"""`qfarm serve` as a process, against real Redis and real `celery worker` processes."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from qfarm.common.jobs import make_job_id
from qfarm.common.models import ALL_MODES
from qfarm.common.questions import question_id_for

from .conftest import ADMIN_TOKEN, ASK_TOKEN, TOKENS, bearer

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
VENV_BIN = Path(os.sys.executable).parent  # type: ignore[attr-defined]
QUESTIONS = [
    "Who were the members of the Beatles?", "What is the capital of France?",
    "Who painted the Mona Lisa?", "What is photosynthesis?", "When did World War II end?",
    "Who wrote Hamlet?", "What is DNA?", "What is jazz?", "Who was Cleopatra?", "What is an atom?",
]
ADMIN = bearer(ADMIN_TOKEN)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def procfile_api() -> list[str]:
    for line in (REPO / "Procfile").read_text().splitlines():
        if line.startswith("api:"):
            return shlex.split(line.partition(":")[2])
    raise AssertionError("no api line in the Procfile")


class Api:
    def __init__(self, farm, env: dict[str, str]):
        self.port = free_port()
        self.log = farm.log_dir / "api.log"
        argv = procfile_api() + ["--port", str(self.port), "--log-level", "info"]
        self.proc = subprocess.Popen(
            [str(VENV_BIN / argv[0]), *argv[1:]], cwd=REPO, env=env,
            stdout=self.log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=60)
        deadline = time.monotonic() + 60
        while True:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                if self.http.get("/healthz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.2)

    def stop(self) -> None:
        self.http.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


@pytest.fixture
def serve(farm):
    apis: list[Api] = []

    def start(**env: str) -> Api:
        api = Api(farm, {**farm.env, "QFARM_API_TOKENS": TOKENS,
                         "QFARM_DATA_DIR": str(farm.log_dir.parent / "data"), **env})
        apis.append(api)
        return api

    yield start
    for api in apis:
        api.stop()


def wait_state(api: Api, run_id: str, states: set[str], timeout_s: float = 240) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        info = api.http.get(f"/v1/runs/{run_id}", headers=ADMIN).json()
        if info["state"] in states and not info["following"]:
            return info
        assert time.monotonic() < deadline, info
        time.sleep(0.5)


def all_rows(api: Api, run_id: str, limit: int) -> list[dict]:
    rows, cursor = [], 0
    while cursor is not None:
        page = api.http.get(f"/v1/runs/{run_id}/rows", params={"cursor": cursor, "limit": limit},
                            headers=ADMIN).json()
        assert len(page["rows"]) <= limit
        rows += page["rows"]
        cursor = page["next_cursor"]
    return rows


def metric(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        metric_name, _, label_text = head.partition("{")
        if metric_name == name and all(part in label_text for part in want.split(",") if part):
            total += float(value)
    return total


def test_ask_answers_within_wait_s_or_gives_a_job_url(farm, serve):
    farm.start_worker("inter", queues="interactive", concurrency=4)
    api = serve()
    resp = api.http.post("/v1/ask", json={"question": "What is jazz?", "mode": "quote"},
                         headers=bearer(ASK_TOKEN))
    assert resp.status_code == 200, resp.text
    data = resp.json()
    assert data["row"]["worker"] and data["row"]["worker"] != "eager"
    assert data["audit"] and data["evidence"]
    resp = api.http.post("/v1/ask", json={"question": "Who wrote Hamlet?", "wait_s": 0,
                                          "burn": True}, headers=bearer(ASK_TOKEN))
    assert resp.status_code == 202, resp.text
    url = resp.headers["location"]
    assert url == resp.json()["url"] and url.startswith("/v1/jobs/ask-")
    deadline = time.monotonic() + 60
    while (job := api.http.get(url, headers=bearer(ASK_TOKEN))).status_code == 202:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert job.status_code == 200 and job.json()["row"]["question"] == "Who wrote Hamlet?"
    # The same question again is a cache hit (the CLI's cache and governance hash).
    again = api.http.post("/v1/ask", json={"question": "What is jazz?", "mode": "quote"},
                          headers=bearer(ASK_TOKEN)).json()
    assert again["row"]["cache_hit"] and again["row"]["verdict"] == data["row"]["verdict"]


def test_sweep_is_followed_to_its_files_and_paged_without_gaps(farm, serve, tmp_path):
    # prefork, as the Procfile's cpu role: its pool children count and flush rows themselves
    farm.start_worker("w1", pool="prefork", concurrency=2)
    api = serve()
    resp = api.http.post("/v1/sweeps", json={"questions": QUESTIONS, "n": 2}, headers=ADMIN)
    assert resp.status_code == 201, resp.text
    run_id = resp.json()["run_id"]
    assert resp.json()["enqueued"] == 60
    info = wait_state(api, run_id, {"complete"})
    assert info["progress"]["done"] == 60
    rows = all_rows(api, run_id, limit=7)
    ids = [r["job_id"] for r in rows]
    expected = {make_job_id(question_id_for(q), m, i) for q in QUESTIONS for m in ALL_MODES
                for i in range(2)}
    assert len(ids) == len(set(ids)) == 60 and set(ids) == expected
    md = api.http.get(f"/v1/runs/{run_id}/summary", params={"format": "md"}, headers=ADMIN)
    assert md.status_code == 200 and "SIMULATED" in md.text
    assert api.http.get(f"/v1/runs/{run_id}/summary", headers=ADMIN).json()["rows"] == 60
    # The files are the CLI's: `qfarm report` reads them.
    res = farm.qfarm("report", str(Path(farm.env["QFARM_RESULTS_DIR"]) / run_id))
    assert res.returncode == 0, res.stderr
    # Counters the worker produced reach /metrics through Redis (flushed every 2 s).
    deadline = time.monotonic() + 30
    while True:
        text = api.http.get("/metrics", headers=bearer(ASK_TOKEN)).text
        if metric(text, "qfarm_rows_total") >= 60:
            break
        assert time.monotonic() < deadline, text
        time.sleep(1)
    assert metric(text, "qfarm_jobs_enqueued_total") == 60
    assert metric(text, "qfarm_llm_requests_total") >= 40  # claim modes and quote, minus cache
    assert metric(text, "qfarm_workers", role="mixed") == 1
    # At least one lookup a job: a bundle redelivered on a loaded host looks its jobs up again.
    assert metric(text, "qfarm_result_cache_total", result="miss") >= 60
    assert metric(text, "qfarm_llm_breaker_state", state="closed") == 1


def test_cancel_stops_a_sweep_and_its_follower_writes_the_summary(farm, serve):
    # Bundles of 8 (375 messages), not the default 32: the cancel must find messages
    # still queued once the first rows are in, whatever the workers have prefetched. 300
    # jobs were too few: on the zero-latency simulator a worker could finish them all in
    # the moments between the tenth row and the cancel.
    api = serve(QFARM_BUNDLE_SIZE="8")
    resp = api.http.post("/v1/sweeps", json={"questions": QUESTIONS, "n": 100}, headers=ADMIN)
    assert resp.status_code == 201, resp.text
    run_id = resp.json()["run_id"]
    farm.start_worker("w1", concurrency=2)
    assert farm.wait_for(lambda: len(farm.rows(run_id)) >= 10, timeout_s=120)
    resp = api.http.post(f"/v1/runs/{run_id}/cancel", headers=bearer(ASK_TOKEN))
    assert resp.status_code == 403
    resp = api.http.post(f"/v1/runs/{run_id}/cancel", headers=ADMIN)
    assert resp.status_code == 200 and resp.json()["purged_messages"] > 0
    info = wait_state(api, run_id, {"cancelled", "complete"})
    assert info["state"] == "cancelled" and info["progress"]["done"] < 3000
    summary = api.http.get(f"/v1/runs/{run_id}/summary", params={"format": "md"}, headers=ADMIN)
    assert "Run cancelled" in summary.text


def test_resume_resends_the_jobs_a_lost_queue_took(farm, serve):
    api = serve()
    resp = api.http.post("/v1/sweeps", json={"questions": QUESTIONS[:4], "modes": ["quote"],
                                             "n": 3}, headers=ADMIN)
    run_id = resp.json()["run_id"]
    assert farm.redis.llen("retrieve") > 0
    farm.redis.delete("retrieve")  # Redis lost the queue (restart without persistence)
    farm.start_worker("w1")
    time.sleep(2)
    assert len(farm.rows(run_id)) == 0
    resp = api.http.post(f"/v1/runs/{run_id}/resume", headers=ADMIN)
    assert resp.status_code == 202, resp.text
    info = wait_state(api, run_id, {"complete"})
    assert info["progress"]["done"] == 12
    ids = [r["job_id"] for r in all_rows(api, run_id, limit=5)]
    assert len(ids) == len(set(ids)) == 12


def test_a_jsonl_upload_runs_like_a_question_file(farm, serve):
    farm.start_worker("w1")
    api = serve()
    body = "".join(json.dumps({"id": f"q{i}", "question": q}) + "\n"
                   for i, q in enumerate(QUESTIONS[:3]))
    resp = api.http.post("/v1/sweeps", params={"modes": "quote,claim_lattice", "n": "1"},
                         content=body, headers={**ADMIN, "Content-Type": "application/x-ndjson"})
    assert resp.status_code == 201, resp.text
    run_id = resp.json()["run_id"]
    wait_state(api, run_id, {"complete"})
    rows = all_rows(api, run_id, limit=100)
    assert sorted({r["question_id"] for r in rows}) == ["q0", "q1", "q2"]
    runs = api.http.get("/v1/runs", params={"limit": 1}, headers=ADMIN).json()
    assert runs["runs"][0]["run_id"] == run_id
