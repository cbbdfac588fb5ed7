"""The HTTP API on the eager path (no Redis, no workers) and its refusals.

Requests that must be refused are also sent to a distributed app over the test
Redis, to check that nothing was enqueued or written for them.
"""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from qfarm.common import keys
from qfarm.common.errors import ConfigError
from qfarm.producer.http.app import create_app
from qfarm.producer.http.auth import Tokens, check_bind

from .conftest import ADMIN_TOKEN, ASK_TOKEN, TOKENS, bearer

QUESTIONS = ["What is jazz?", "Who wrote Hamlet?", "What is DNA?"]


@pytest.fixture
def eager_client(make_settings):
    with TestClient(create_app(make_settings(api_tokens=TOKENS), eager=True)) as client:
        yield client


@pytest.fixture
def farm_client(make_settings, test_redis):
    """A distributed app (Redis, no workers): for requests that must enqueue nothing."""
    settings = make_settings(api_tokens=TOKENS, api_max_jobs=50, max_question_chars=200,
                             api_max_body_bytes=4096)
    with TestClient(create_app(settings)) as client:
        client.settings = settings
        yield client


# ---------------------------------------------------------------- auth

def test_health_is_open_and_everything_else_needs_a_token(eager_client):
    assert eager_client.get("/healthz").status_code == 200
    for method, path in [("get", "/v1/runs"), ("post", "/v1/ask"), ("post", "/v1/sweeps"),
                         ("get", "/v1/runs/x"), ("post", "/v1/runs/x/cancel"), ("get", "/")]:
        resp = getattr(eager_client, method)(path)
        assert resp.status_code == 401, (path, resp.text)
        assert "token" in resp.json()["error"]["message"]


def test_a_wrong_token_is_401_and_a_right_one_200(eager_client):
    assert eager_client.get("/v1/runs", headers=bearer("x" * 30)).status_code == 401
    assert eager_client.get("/v1/runs", headers={"Authorization": ADMIN_TOKEN}).status_code == 401
    assert eager_client.get("/v1/runs", headers=bearer(ADMIN_TOKEN[:-1])).status_code == 401
    resp = eager_client.get("/v1/runs", headers=bearer(ADMIN_TOKEN))
    assert resp.status_code == 200 and resp.json() == {"runs": [], "next_cursor": None}
    assert eager_client.get("/v1/runs", headers=bearer(ASK_TOKEN)).status_code == 200


def test_the_ask_scope_may_ask_but_not_sweep_or_cancel(eager_client):
    sweep = {"questions": QUESTIONS[:1], "modes": ["quote"]}
    resp = eager_client.post("/v1/sweeps", json=sweep, headers=bearer(ASK_TOKEN))
    assert resp.status_code == 403 and "admin" in resp.json()["error"]["message"]
    assert eager_client.post("/v1/runs/x/cancel", headers=bearer(ASK_TOKEN)).status_code == 403
    resp = eager_client.post("/v1/ask", json={"question": "What is jazz?", "mode": "quote"},
                             headers=bearer(ASK_TOKEN))
    assert resp.status_code == 200, resp.text


def test_tokens_have_scopes_and_short_ones_are_refused(make_settings):
    tokens = Tokens.from_settings(make_settings(api_tokens=TOKENS))
    assert tokens.scope_of(ADMIN_TOKEN) == "admin"
    assert tokens.scope_of(ASK_TOKEN) == "ask"
    assert tokens.scope_of("ask:" + ASK_TOKEN) is None
    with pytest.raises(ConfigError, match="entry 2 has a token of fewer than 16") as exc:
        make_settings(api_tokens=f"{ADMIN_TOKEN},ask:short-secret")
    assert "short-secret" not in str(exc.value)


def test_a_non_loopback_address_without_tokens_is_refused(make_settings):
    open_farm = Tokens.from_settings(make_settings())
    for host in ("127.0.0.1", "::1", "localhost"):
        check_bind(host, open_farm)
    with pytest.raises(ConfigError, match="refusing to listen on 0.0.0.0 with no QFARM_API_TOKENS"):
        check_bind("0.0.0.0", open_farm)
    check_bind("0.0.0.0", Tokens.from_settings(make_settings(api_tokens=TOKENS)))


def test_qfarm_serve_refuses_a_public_address_without_tokens(capsys):
    from qfarm.cli import main

    assert main(["serve", "--host", "0.0.0.0", "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert "refusing to listen on 0.0.0.0" in err and err.count("\n") == 1


# ---------------------------------------------------------------- the viewer

def test_viewer_pages_take_the_token_once_then_a_cookie(eager_client):
    resp = eager_client.get(f"/?token={ADMIN_TOKEN}", follow_redirects=False)
    assert resp.status_code == 303 and resp.headers["location"] == "/"
    cookie = resp.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    page = eager_client.get("/")  # the client keeps the cookie
    assert page.status_code == 200 and "<html" in page.text
    eager_client.cookies.clear()
    assert eager_client.get("/").status_code == 401
    assert eager_client.get("/?token=" + "y" * 30).status_code == 401
    assert eager_client.get("/", headers=bearer(ASK_TOKEN)).status_code == 200


@pytest.mark.parametrize("path", ["//evil.example/", "/\\evil.example/", "///evil.example/"])
def test_a_login_redirects_only_to_a_path_on_this_server(eager_client, path):
    resp = eager_client.get(f"http://testserver{path}?token={ADMIN_TOKEN}&x=1",
                            follow_redirects=False)
    assert resp.status_code == 303
    location = resp.headers["location"]
    # A path here: one slash, then no slash or backslash a browser would read as a host.
    assert location[0] == "/" and location[1] not in "/\\", location
    assert location.endswith("evil.example/?x=1")


def test_viewer_without_tokens_is_open_on_loopback(make_settings):
    with TestClient(create_app(make_settings(), eager=True)) as client:
        assert client.get("/").status_code == 200
        assert client.get("/static/viewer.css").status_code == 200


def test_viewer_lists_a_run_whose_rows_have_not_landed_yet(make_settings):
    """The moment after a sweep is posted (or after ``--detach``): a manifest, no rows.jsonl."""
    from bench.perf.viewer import write_synthetic_run

    settings = make_settings()
    run_dir = write_synthetic_run(settings.results_dir, "20260101-000000-nrows0", 2,
                                  status="running")
    (run_dir / "rows.jsonl").unlink()
    with TestClient(create_app(settings, eager=True)) as client:
        page = client.get("/")
        assert page.status_code == 200 and "20260101-000000-nrows0" in page.text
        assert client.get("/runs/20260101-000000-nrows0").status_code == 200


# ---------------------------------------------------------------- bad bodies

@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"question": "What is jazz?", "policy": {"top_kk": 3}}, "policy.top_kk", "nearest: top_k"),
        ({"question": "What is jazz?", "policy": {"top_k": 0}}, "policy.top_k", "1 <= top_k <= 100"),
        ({"question": "What is jazz?", "mode": "qoute"}, "mode",
         "choose from quote, claim_lattice_pointer, claim_lattice"),
        ({"question": "x" * 201}, "question", "at most 200"),
        ({"question": "What is\u0000 jazz?"}, "question", "control character (U+0000)"),
        ({"question": "   "}, "question", "empty"),
        ({"question": "What is jazz?", "wait_s": 1000}, "wait_s", "at most 120"),
        ({"question": "What is jazz?", "burnn": True}, "burnn", "unknown field"),
        ({"mode": "quote"}, "question", "Field required"),
    ],
)
def test_a_bad_question_is_422_naming_the_field_and_nothing_is_enqueued(
        farm_client, test_redis, body, field, words):
    resp = farm_client.post("/v1/ask", json=body, headers=bearer(ADMIN_TOKEN))
    assert resp.status_code == 422, resp.text
    error = resp.json()["error"]
    assert error["field"] == field and words in error["message"], error
    assert test_redis.llen("interactive") == 0 and not test_redis.exists("qfarm:runs")


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"questions": QUESTIONS, "n": 0}, "n", "greater than or equal to 1"),
        ({"questions": QUESTIONS, "n": 1001}, "n", "less than or equal to 1000"),
        ({"questions": QUESTIONS, "n": 6}, "n", "54 jobs; at most 50"),  # QFARM_API_MAX_JOBS
        ({"questions": QUESTIONS, "modes": ["quote", "bogus"]}, "modes", "unknown mode 'bogus'"),
        ({"questions": QUESTIONS, "policy": {"temprature": 0.1}}, "policy.temprature",
         "nearest: temperature"),
        ({"questions": ["What is jazz?", "y" * 201]}, "questions[1]", "at most 200"),
        ({"questions": ["What is jazz?", "Who\x1b[2J?"]}, "questions[1]", "control character (U+001B)"),
        ({"questions": QUESTIONS, "keep_answer": True}, "keep_answer", "unknown field"),
    ],
)
def test_a_bad_sweep_is_422_and_nothing_is_enqueued_or_written(
        farm_client, test_redis, body, field, words):
    resp = farm_client.post("/v1/sweeps", json=body, headers=bearer(ADMIN_TOKEN))
    assert resp.status_code == 422, resp.text
    error = resp.json()["error"]
    assert error["field"] == field and words in error["message"], error
    assert test_redis.llen("retrieve") == 0 and not test_redis.exists("qfarm:runs")
    assert not farm_client.settings.results_dir.exists()


def test_a_bad_jsonl_upload_names_its_line(farm_client, test_redis):
    body = b'{"id": "a", "question": "What is jazz?"}\n{"id": "b", "question": \n'
    resp = farm_client.post("/v1/sweeps?modes=quote", content=body, headers={
        **bearer(ADMIN_TOKEN), "Content-Type": "application/x-ndjson"})
    assert resp.status_code == 422
    assert "upload:2" in resp.json()["error"]["message"]
    assert test_redis.llen("retrieve") == 0 and not test_redis.exists("qfarm:runs")


def test_an_upload_follows_the_servers_question_limit(farm_client, test_redis):
    """The one limit (QFARM_MAX_QUESTION_CHARS, 200 here) applies to an upload's lines too."""
    body = ('{"id": "a", "question": "What is jazz?"}\n{"id": "b", "question": "' + "z" * 201
            + '"}\n').encode()
    resp = farm_client.post("/v1/sweeps?modes=quote", content=body, headers={
        **bearer(ADMIN_TOKEN), "Content-Type": "application/x-ndjson"})
    assert resp.status_code == 422
    assert "upload:2: the question is 201 characters; at most 200" in resp.json()["error"]["message"]
    assert test_redis.llen("retrieve") == 0 and not test_redis.exists("qfarm:runs")


def test_bodies_over_the_limit_are_413(farm_client, test_redis):
    big = {"questions": ["What is jazz?"] * 400}  # ~6 kB > 4096
    resp = farm_client.post("/v1/sweeps", json=big, headers=bearer(ADMIN_TOKEN))
    assert resp.status_code == 413 and "QFARM_API_MAX_BODY_BYTES" in resp.text

    def chunks():  # no Content-Length: counted while read
        for _ in range(10):
            yield b"x" * 1000

    resp = farm_client.post("/v1/sweeps", content=chunks(), headers={
        **bearer(ADMIN_TOKEN), "Content-Type": "application/x-ndjson"})
    assert resp.status_code == 413
    assert test_redis.llen("retrieve") == 0 and not test_redis.exists("qfarm:runs")


# ---------------------------------------------------------------- the eager path

def test_ask_answers_with_the_row_audit_line_and_evidence(eager_client):
    resp = eager_client.post("/v1/ask", json={
        "question": "Who were the members of the Beatles?", "mode": "quote"},
        headers=bearer(ADMIN_TOKEN))
    assert resp.status_code == 200, resp.text
    data = resp.json()
    assert data["state"] == "done" and data["row"]["mode"] == "quote"
    assert data["row"]["run_id"].startswith("ask-")
    assert "via quote" in data["audit"] and "simulated" in data["audit"]
    assert data["evidence"] and data["evidence"][0]["id"] == "E1"
    assert data["answer"]  # a question keeps its answer, as `qfarm ask` does


def test_sweep_then_run_rows_paging_and_summary(eager_client):
    headers = bearer(ADMIN_TOKEN)
    resp = eager_client.post("/v1/sweeps", json={"questions": QUESTIONS, "n": 2}, headers=headers)
    assert resp.status_code == 201, resp.text
    run_id = resp.json()["run_id"]
    run = eager_client.get(f"/v1/runs/{run_id}", headers=headers).json()
    assert run["state"] == "complete" and run["progress"]["done"] == 18
    assert run["manifest"]["n"] == 2
    seen, cursor = [], 0
    while cursor is not None:
        page = eager_client.get(f"/v1/runs/{run_id}/rows",
                                params={"cursor": cursor, "limit": 4}, headers=headers).json()
        assert len(page["rows"]) <= 4
        seen += [r["job_id"] for r in page["rows"]]
        cursor = page["next_cursor"]
    assert len(seen) == len(set(seen)) == 18
    quote = eager_client.get(f"/v1/runs/{run_id}/rows", params={"mode": "quote"},
                             headers=headers).json()["rows"]
    assert len(quote) == 6 and {r["mode"] for r in quote} == {"quote"}
    streamed = eager_client.get(f"/v1/runs/{run_id}/rows", params={"stream": "true"},
                                headers=headers)
    assert [json.loads(line)["job_id"] for line in streamed.text.splitlines()] == seen
    md = eager_client.get(f"/v1/runs/{run_id}/summary", params={"format": "md"}, headers=headers)
    assert md.status_code == 200 and "SIMULATED" in md.text
    summary = eager_client.get(f"/v1/runs/{run_id}/summary", headers=headers).json()
    assert summary["rows"] == 18 and set(summary["modes"]) == {
        "quote", "claim_lattice_pointer", "claim_lattice"}
    listed = eager_client.get("/v1/runs", headers=headers).json()["runs"]
    assert [r["run_id"] for r in listed] == [run_id]
    cmp = eager_client.get("/v1/compare", params={"a": run_id, "b": run_id}, headers=headers)
    assert cmp.status_code == 200 and cmp.json()["deltas"]
    bad = eager_client.get(f"/v1/runs/{run_id}/rows", params={"verdict": "GOOD"}, headers=headers)
    assert bad.status_code == 422 and "STRICT, HYBRID, UNGROUNDED, none" in bad.text


def test_an_uploaded_set_is_listed_by_its_name_and_keeps_its_gold_answers(eager_client):
    headers = bearer(ADMIN_TOKEN)
    lines = [{"id": "beatles", "question": "Who were the members of the Beatles?",
              "answers": ["John Lennon", "Paul McCartney"]},
             {"id": "jazz", "question": "What is jazz?"}]
    body = "".join(json.dumps(line) + "\n" for line in lines)
    resp = eager_client.post("/v1/sweeps?name=beatles-set.jsonl&modes=quote", content=body,
                             headers={**headers, "Content-Type": "application/x-ndjson"})
    assert resp.status_code == 201, resp.text
    run_id = resp.json()["run_id"]
    (item,) = [r for r in eager_client.get("/v1/runs", headers=headers).json()["runs"]
               if r["run_id"] == run_id]
    assert item["question_set"] == "beatles-set" and item["kind"] == "sweep"
    digest_dir = item["question_file"].split("/")[-2]
    page = eager_client.get("/", headers=headers).text
    assert ">beatles-set</span>" in page and f">{digest_dir}" not in page
    rows = eager_client.get(f"/v1/runs/{run_id}/rows", headers=headers).json()["rows"]
    pos = [r["question_id"] for r in rows].index("beatles")
    assert rows[pos]["gold_in_claims"] is not None  # the workers graded against the answers
    row_page = eager_client.get(f"/runs/{run_id}/rows/{pos}", headers=headers).text
    assert "<ul class=gold><li>John Lennon</li><li>Paul McCartney</li></ul>" in row_page
    bad = eager_client.post("/v1/sweeps?name=../x", content=body,
                            headers={**headers, "Content-Type": "application/x-ndjson"})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "name"


def test_unknown_runs_are_404(eager_client):
    headers = bearer(ADMIN_TOKEN)
    for path in ("/v1/runs/nope", "/v1/runs/nope/rows", "/v1/runs/nope/summary",
                 "/v1/runs/..%2Fetc/rows"):
        assert eager_client.get(path, headers=headers).status_code == 404, path


def test_openapi_lists_every_route(eager_client):
    assert eager_client.get("/openapi.json").status_code == 401
    assert eager_client.get("/docs").status_code == 401
    paths = set(eager_client.get("/openapi.json", headers=bearer(ASK_TOKEN)).json()["paths"])
    assert {"/v1/ask", "/v1/jobs/{job_id}", "/v1/sweeps", "/v1/runs", "/v1/runs/{run_id}",
            "/v1/runs/{run_id}/rows", "/v1/runs/{run_id}/summary", "/v1/runs/{run_id}/cancel",
            "/v1/runs/{run_id}/resume", "/v1/compare", "/metrics", "/healthz"} <= paths


def test_docs_pages_load_their_assets_from_this_server(eager_client):
    """Swagger UI and ReDoc work without internet: no page references another host, and
    every script and stylesheet it names is served here."""
    import re

    for page in ("/docs", "/redoc"):
        html = eager_client.get(page, headers=bearer(ASK_TOKEN))
        assert html.status_code == 200
        urls = re.findall(r'(?:src|href)\s*=\s*["\']([^"\']+)', html.text)
        urls += re.findall(r"url:\s*'([^']+)'", html.text)  # the schema Swagger UI fetches
        assert urls and not [u for u in urls if "//" in u], urls
        for url in urls:
            assert eager_client.get(url, headers=bearer(ASK_TOKEN)).status_code == 200, url
    assert "/static-docs/swagger-ui-bundle.js" in eager_client.get(
        "/docs", headers=bearer(ASK_TOKEN)).text


def test_unknown_jobs_are_404_and_metrics_render_with_no_worker(farm_client, test_redis):
    assert farm_client.get("/v1/jobs/ask-nope", headers=bearer(ASK_TOKEN)).status_code == 404
    assert farm_client.get("/v1/jobs/run-1", headers=bearer(ASK_TOKEN)).status_code == 404
    assert farm_client.get("/metrics").status_code == 401
    resp = farm_client.get("/metrics", headers=bearer(ASK_TOKEN))
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
    assert 'qfarm_workers{role="interactive"} 0.0' in resp.text
    assert 'qfarm_queue_messages{queue="retrieve"} 0.0' in resp.text
    # The requests above are counted by route and status.
    assert 'qfarm_api_requests_total{route="/v1/jobs/{job_id}",status="404"} 2.0' in resp.text


def test_ask_without_an_interactive_worker_is_503_and_enqueues_nothing(farm_client, test_redis,
                                                                     monkeypatch):

    import qfarm.producer.runs.ask

    monkeypatch.setattr(qfarm.producer.runs.ask, "_interactive_seen_at", 0.0)  # no worker seen lately
    resp = farm_client.post("/v1/ask", json={"question": "What is jazz?", "wait_s": 1},
                            headers=bearer(ASK_TOKEN))
    assert resp.status_code == 503
    assert "no worker is consuming the interactive queue" in resp.json()["error"]["message"]
    assert test_redis.llen("interactive") == 0 and not test_redis.exists("qfarm:runs")


def test_a_browser_without_a_viewer_token_gets_a_page_saying_how_to_log_in(eager_client):
    eager_client.cookies.clear()
    page = eager_client.get("/runs/r1", headers={"Accept": "text/html"})
    assert page.status_code == 401 and page.headers["content-type"].startswith("text/html")
    assert "<code>QFARM_API_TOKENS</code>" in page.text and 'action="/runs/r1"' in page.text
    bad = eager_client.get("/?token=" + "y" * 30, headers={"Accept": "text/html"})
    assert bad.status_code == 401 and "id=invalid" in bad.text
    assert eager_client.get("/").json()["error"]["status"] == 401  # a script: JSON as before


def test_the_servers_followers_wait_for_a_worker_without_the_sweeps_bound(monkeypatch):
    """A sweep posted before its workers start is the server's to finish: its follower is
    not stopped after QFARM_WAIT_FOR_WORKERS_S as a terminal's `qfarm sweep` is."""
    import threading

    import qfarm.producer.http.app as app_module
    from qfarm.common.settings import Settings
    from qfarm.producer.http.app import Followers

    seen: list[float] = []
    done = threading.Event()

    def follow_run(run_id: str, *, resend_missing: bool, settings: Settings):
        seen.append(settings.wait_for_workers_s)
        done.set()
        raise app_module.QfarmError("stop here")

    monkeypatch.setattr(app_module, "follow_run", follow_run)
    Followers(Settings(wait_for_workers_s=60)).start("r1")
    assert done.wait(10) and seen == [0.0]


@pytest.mark.parametrize("as_upload", [False, True], ids=["json", "jsonl"])
def test_a_sweep_asks_for_the_response_cache_as_the_cli_does(farm_client, test_redis,
                                                            as_upload):
    if as_upload:
        resp = farm_client.post("/v1/sweeps?modes=quote&cache=true",
                                content=b'{"id": "a", "question": "What is jazz?"}\n',
                                headers={**bearer(ADMIN_TOKEN),
                                         "Content-Type": "application/x-ndjson"})
    else:
        resp = farm_client.post("/v1/sweeps", json={"questions": ["What is jazz?"],
                                                    "modes": ["quote"], "cache": True},
                                headers=bearer(ADMIN_TOKEN))
    assert resp.status_code == 201, resp.text
    manifest = json.loads(test_redis.get(keys.manifest_key(resp.json()["run_id"])))
    assert manifest["response_cache"] is True
