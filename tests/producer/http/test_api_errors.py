"""The API answers 503 or a 4xx, never a 500, where docs/api.md promises one: Redis gone
under a running server, ids and cursors out of range, text that is not text, and many
identical sweeps at once."""

from __future__ import annotations

import json
import socket
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient

from qfarm.producer.http.app import create_app

from .conftest import ADMIN_TOKEN, TOKENS, bearer

pytestmark = pytest.mark.slow


def _start_redis(tmp_path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    client, deadline = redis.Redis.from_url(url), time.monotonic() + 10
    while True:
        try:
            client.ping()
            return proc, url
        except redis.ConnectionError:
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)


def test_redis_gone_under_a_running_server_is_503_everywhere(make_settings, tmp_path):
    proc, url = _start_redis(tmp_path)
    try:
        settings = make_settings(redis_url=url, api_tokens=TOKENS)
        with TestClient(create_app(settings), raise_server_exceptions=False) as client:
            auth = bearer(ADMIN_TOKEN)
            # Redis answers: the server connects, and builds its ask context (no worker
            # consumes the interactive queue, so the question itself is refused with 503).
            assert client.get("/v1/runs", headers=auth).status_code == 200
            first = client.post("/v1/ask", json={"question": "What is jazz?"}, headers=auth)
            assert first.status_code == 503, first.text
            created = client.post("/v1/sweeps", json={"questions": ["What is jazz?"],
                                                      "modes": ["quote"]}, headers=auth)
            assert created.status_code == 201, created.text
            run_id = created.json()["run_id"]
            proc.kill()
            proc.wait(timeout=10)
            for method, path, body in [
                ("get", "/v1/runs", None), ("get", "/metrics", None),
                ("get", f"/v1/runs/{run_id}", None), ("get", "/v1/runs/20990101-000000-abcdef", None),
                ("get", "/v1/jobs/ask-20990101-000000-abcdef", None),
                ("post", "/v1/ask", {"question": "What is jazz?"}),
                ("post", f"/v1/runs/{run_id}/cancel", None),
                ("post", f"/v1/runs/{run_id}/resume", None),
                ("post", "/v1/sweeps", {"questions": ["What is DNA?"], "modes": ["quote"]}),
            ]:
                resp = getattr(client, method)(path, headers=auth,
                                               **({"json": body} if body else {}))
                assert resp.status_code == 503, (method, path, resp.status_code, resp.text)
                message = resp.json()["error"]["message"]
                assert "Redis" in message and "\n" not in message, (path, message)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


@pytest.fixture
def farm_client(make_settings, test_redis):
    settings = make_settings(api_tokens=TOKENS)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        client.settings = settings
        yield client


def test_a_run_id_too_long_for_a_file_name_is_404(farm_client):
    long_id = "a" * 5000
    for path in (f"/v1/runs/{long_id}", f"/v1/runs/{long_id}/rows", f"/v1/runs/{long_id}/summary",
                 f"/runs/{long_id}", f"/runs/{long_id}/rows"):
        resp = farm_client.get(path, headers=bearer(ADMIN_TOKEN))
        assert resp.status_code == 404, (path, resp.status_code, resp.text[:200])
    for path in (f"/v1/runs/{long_id}/cancel", f"/v1/runs/{long_id}/resume"):
        resp = farm_client.post(path, headers=bearer(ADMIN_TOKEN))
        assert resp.status_code == 404, (path, resp.status_code, resp.text[:200])


def test_a_cursor_past_the_end_of_the_rows_is_422(make_settings):
    with TestClient(create_app(make_settings(), eager=True),
                    raise_server_exceptions=False) as client:
        created = client.post("/v1/sweeps", json={"questions": ["What is jazz?"],
                                                  "modes": ["quote"]})
        assert created.status_code == 201, created.text
        run_id = created.json()["run_id"]
        first = client.get(f"/v1/runs/{run_id}/rows")
        assert len(first.json()["rows"]) == 1 and first.json()["next_cursor"] is None
        for cursor in ("99999999999999", "999999999999999", "100000"):
            for stream in ("false", "true"):
                resp = client.get(f"/v1/runs/{run_id}/rows?cursor={cursor}&stream={stream}")
                assert resp.status_code == 422, (cursor, stream, resp.status_code, resp.text)
                assert resp.json()["error"]["field"] == "cursor"


def test_a_lone_surrogate_in_a_question_is_422(farm_client):
    body = b'{"question": "What is \\ud800 jazz?"}'
    resp = farm_client.post("/v1/ask", content=body, headers={
        **bearer(ADMIN_TOKEN), "Content-Type": "application/json"})
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"]["field"] == "question"
    sweep = b'{"questions": ["What is \\udfff jazz?"], "modes": ["quote"]}'
    resp = farm_client.post("/v1/sweeps", content=sweep, headers={
        **bearer(ADMIN_TOKEN), "Content-Type": "application/json"})
    assert resp.status_code == 422, resp.text


@pytest.mark.parametrize("body", [
    b'{"questions": ["What is jazz?"], "modes": ["quote"], "n": "2"}',
    b'{"questions": ["What is jazz?"], "modes": ["quote"], "burn": "yes"}',
    b'{"questions": ["What is jazz?"], "modes": ["quote"], "n": 2.0}',
])  # fmt: skip
def test_a_value_of_the_wrong_json_type_is_422_not_converted(farm_client, body: bytes):
    resp = farm_client.post("/v1/sweeps", content=body, headers={
        **bearer(ADMIN_TOKEN), "Content-Type": "application/json"})
    assert resp.status_code == 422, resp.text


def test_thirty_identical_sweeps_at_once_are_all_created(make_settings, tmp_path):
    proc, url = _start_redis(tmp_path)  # its own Redis: the runs' followers outlive the app
    settings = make_settings(redis_url=url, api_tokens=TOKENS)
    body = {"questions": ["What is jazz?", "Who wrote Hamlet?"], "modes": ["quote"]}
    try:
        app = create_app(settings)
        with TestClient(app, raise_server_exceptions=False) as client:

            def post(_: int) -> tuple[int, str]:
                resp = client.post("/v1/sweeps", json=body, headers=bearer(ADMIN_TOKEN))
                return resp.status_code, resp.text

            with ThreadPoolExecutor(30) as pool:
                results = list(pool.map(post, range(30)))
            assert [s for s, _ in results] == [201] * 30, [r for r in results if r[0] != 201]
            uploads = list((settings.data_dir / "uploads").glob("*/*"))
            assert len(uploads) == 1 and uploads[0].name == "request.jsonl", uploads
            assert [json.loads(line)["question"] for line in uploads[0].open()] == body["questions"]
            for _, text in results:  # no worker runs them: cancel, so their followers end
                run_id = json.loads(text)["run_id"]
                client.post(f"/v1/runs/{run_id}/cancel", headers=bearer(ADMIN_TOKEN))
            followers = app.state.farm.followers
            deadline = time.monotonic() + 60
            while any(t.is_alive() for t in list(followers.threads.values())):
                assert time.monotonic() < deadline, "followers did not end after cancel"
                time.sleep(0.2)
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_identical_uploads_written_at_once_all_land():
    """The file behind POST /v1/sweeps' question set, written by 30 requests at once (the
    test above goes through the API, where the requests' parsing spaces the writes out)."""
    import threading

    from qfarm.common.models import Question
    from qfarm.common.settings import Settings
    from qfarm.producer.http.requests import upload_questions

    settings = Settings(data_dir=Path(tempfile.mkdtemp(prefix="qfarm-uploads-")))
    failures = []
    for round_ in range(10):
        questions = [Question(id=f"q{i}", text=f"round {round_} question {i}", source="t")
                     for i in range(3)]
        barrier = threading.Barrier(30)

        def write(barrier: threading.Barrier, questions: list[Question]) -> None:
            barrier.wait()
            try:
                upload_questions(settings, questions)
            except OSError as exc:
                failures.append(exc)

        with ThreadPoolExecutor(30) as pool:
            list(pool.map(write, [barrier] * 30, [questions] * 30))
    assert failures == []
    files = sorted((settings.data_dir / "uploads").glob("*/*"))
    assert [p.name for p in files] == ["upload.jsonl"] * 10
