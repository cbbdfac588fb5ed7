"""Rows of a run that this server has no directory for (another host follows it) are
read from Redis and paged with r-cursors; a file run refuses an r-cursor."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient

from qfarm.producer import SweepSpec, run_sweep
from qfarm.producer.http.app import create_app
from qfarm.producer.store import ProducerStore
from qfarm.worker.store import WorkerStore

from .conftest import ADMIN_TOKEN, TOKENS, bearer

QUESTIONS = ["What is jazz?", "Who wrote Hamlet?", "What is DNA?"]


def _page_all(client: TestClient, run_id: str, **params: object) -> tuple[list[dict], list]:
    rows, cursors, cursor = [], [], "0"
    while cursor is not None:
        resp = client.get(f"/v1/runs/{run_id}/rows", params={"cursor": cursor, **params},
                          headers=bearer(ADMIN_TOKEN))
        assert resp.status_code == 200, resp.text
        page = resp.json()
        rows += page["rows"]
        cursor = page["next_cursor"]
        cursors.append((page["source"], cursor))
    return rows, cursors


def test_a_redis_only_run_pages_from_redis(make_settings, test_redis, tmp_path):
    # A finished eager run stands in for a run another host's producer followed: its
    # manifest and rows go into Redis; this server's results directory has no copy.
    done = run_sweep(SweepSpec(questions=QUESTIONS, modes=["quote"], n=2), eager=True,
                     settings=make_settings())
    rows = done.rows()
    ProducerStore(test_redis).put_manifest(done.manifest)
    WorkerStore(test_redis).write_rows(rows)
    settings = make_settings(api_tokens=TOKENS, results_dir=tmp_path / "elsewhere")
    with TestClient(create_app(settings)) as client:
        got, cursors = _page_all(client, done.run_id, limit=4)
        assert sorted(r["job_id"] for r in got) == sorted(r.job_id for r in rows)  # none twice
        assert cursors == [("redis", "r4"), ("redis", None)]  # complete: the last page ends it
        jazz, _ = _page_all(client, done.run_id, limit=1, verdict=rows[0].grading.verdict)
        assert jazz and all(r["verdict"] == rows[0].grading.verdict for r in jazz)
        streamed = client.get(f"/v1/runs/{done.run_id}/rows",
                              params={"stream": "true", "cursor": "r2"},
                              headers=bearer(ADMIN_TOKEN))
        assert len(streamed.text.splitlines()) == len(rows) - 2


def test_an_r_cursor_on_a_file_run_is_refused(make_settings, test_redis):
    settings = make_settings(api_tokens=TOKENS)
    done = run_sweep(SweepSpec(questions=QUESTIONS[:1], modes=["quote"]), eager=True,
                     settings=settings)
    with TestClient(create_app(settings)) as client:
        resp = client.get(f"/v1/runs/{done.run_id}/rows", params={"cursor": "r1"},
                          headers=bearer(ADMIN_TOKEN))
        assert resp.status_code == 422 and "byte offsets" in resp.text
        rows, cursors = _page_all(client, done.run_id)
        assert len(rows) == 1 and cursors[-1] == ("file", None)


def test_a_restarted_server_follows_again_the_runs_it_left_running(make_settings, test_redis):
    # A server died while following: status.json still says running, Redis still has
    # the run. The next server start takes the run up again and finishes it.
    from qfarm.common.runstatus import StatusRecord
    from qfarm.producer.rundir import read_status, write_json_atomic, write_status

    settings = make_settings(api_tokens=TOKENS)
    done = run_sweep(SweepSpec(questions=QUESTIONS, modes=["quote"]), eager=True,
                     settings=settings)
    (done.run_dir / "summary.md").unlink()
    write_status(done.run_dir, StatusRecord(status="running"))
    manifest = done.manifest.model_copy(update={"eager": False})  # as a distributed run's
    write_json_atomic(done.run_dir / "manifest.json", manifest.model_dump(mode="json"))
    ProducerStore(test_redis).put_manifest(manifest)
    WorkerStore(test_redis).write_rows(done.rows())
    finished = make_settings(api_tokens=TOKENS)
    with TestClient(create_app(finished)) as client:
        deadline = time.monotonic() + 60
        while read_status(done.run_dir).status == "running":
            assert time.monotonic() < deadline, "the run was not followed again"
            time.sleep(0.2)
        assert read_status(done.run_dir).status == "complete"
        assert (done.run_dir / "summary.md").exists()
        rows, _ = _page_all(client, done.run_id)
        assert len(rows) == len(QUESTIONS)  # nothing doubled by the second follower
