"""Tokens, LLM API keys and Redis passwords never reach a response, a log or a run file."""

from __future__ import annotations

import time

import pytest

from .conftest import ADMIN_TOKEN, ASK_TOKEN, TOKENS, bearer
from .test_serve_distributed import QUESTIONS, Api, wait_state

pytestmark = pytest.mark.slow

REDIS_PASSWORD = "redis-pw-Zq8vX3kLm9"
LLM_KEY = "llm-key-Hs72PdQw0e"


def test_no_secret_in_responses_logs_or_files(farm, own_redis, tmp_path):
    from qfarm.ops.sim.launch import start_simulator

    url = own_redis("--requirepass", REDIS_PASSWORD, password=REDIS_PASSWORD)
    port = url.split(":")[2].split("/")[0]
    sim = start_simulator(ttft_ms=0, tpot_ms=0, api_key=LLM_KEY)
    farm.env.update(
        QFARM_REDIS_URL=f"redis://:{REDIS_PASSWORD}@127.0.0.1:{port}/0",
        QFARM_LLM_ENDPOINTS=sim.url,
        QFARM_LLM_API_KEY=LLM_KEY,
        QFARM_API_TOKENS=TOKENS,
        QFARM_DATA_DIR=str(tmp_path / "data"),
    )
    bodies: list[str] = []
    api = None
    try:
        farm.start_worker("w1")
        api = Api(farm, farm.env)

        def call(method: str, path: str, **kw) -> str:
            resp = getattr(api.http, method)(path, **kw)
            bodies.append(resp.text + str(resp.headers))
            return resp.text

        answer = call("post", "/v1/ask", json={"question": "What is jazz?"},
                      headers=bearer(ASK_TOKEN))
        assert '"state":"done"' in answer, answer
        call("post", "/v1/ask", json={"question": "What is jazz?", "policy": {"top_kk": 1}},
             headers=bearer(ASK_TOKEN))
        call("get", "/v1/runs", headers=bearer("wrong-" + ADMIN_TOKEN))
        call("get", f"/?token={ADMIN_TOKEN}", follow_redirects=False)
        created = api.http.post("/v1/sweeps", json={"questions": QUESTIONS[:3], "n": 1,
                                                    "keep_answers": True},
                                headers=bearer(ADMIN_TOKEN))
        assert created.status_code == 201, created.text
        run_id = created.json()["run_id"]
        wait_state(api, run_id, {"complete"})
        for path in (f"/v1/runs/{run_id}", f"/v1/runs/{run_id}/rows", "/v1/runs",
                     f"/v1/runs/{run_id}/summary", f"/v1/runs/{run_id}/summary?format=md",
                     "/metrics", "/healthz", "/openapi.json", f"/runs/{run_id}"):
            call("get", path, headers=bearer(ADMIN_TOKEN))
        time.sleep(2.5)  # a metrics flush and a few follower polls into the logs
    finally:
        if api is not None:
            api.stop()
        farm.stop_all()
        sim.stop()
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "rows.jsonl" for p in written)
    assert any(p.name == "api.log" and p.stat().st_size > 0 for p in written)
    # The token itself was sent in a response? Only as the viewer's cookie (to its owner).
    cookie_bodies = [b for b in bodies if "set-cookie" in b]
    for secret in (ADMIN_TOKEN, ASK_TOKEN, REDIS_PASSWORD, LLM_KEY):
        for body in bodies:
            if body in cookie_bodies and secret == ADMIN_TOKEN:
                continue
            assert secret not in body, (secret, body[:300])
        for path in written:
            assert secret.encode() not in path.read_bytes(), (secret, path)
    assert any(p.parent.name == run_id for p in written)


def test_the_settings_error_for_a_bad_token_entry_does_not_echo_it():
    from qfarm.common.errors import ConfigError
    from qfarm.common.settings import load_settings

    with pytest.raises(ConfigError) as exc:
        load_settings(api_tokens="ask:tiny-secret-x")
    assert "tiny-secret-x" not in str(exc.value)


ENDPOINT_PASSWORD = "ep-pw-Kd83nXq2Lw"


def test_an_endpoint_password_reaches_no_file_response_or_error(make_settings, sim_url, tmp_path):
    """``QFARM_LLM_ENDPOINTS=http://user:PW@host:port``: the run's files, the API's answers
    and the errors that name the endpoint show ``user:***@``."""
    from fastapi.testclient import TestClient

    from qfarm.common.errors import ConfigError
    from qfarm.producer.http.app import create_app
    from qfarm.worker.llm.pool import build_targets

    authed = sim_url.replace("http://", f"http://alice:{ENDPOINT_PASSWORD}@")
    settings = make_settings(llm_endpoints=authed, api_tokens=TOKENS)
    with TestClient(create_app(settings, eager=True)) as client:
        created = client.post("/v1/sweeps", json={"questions": QUESTIONS[:1], "modes": ["quote"]},
                              headers=bearer(ADMIN_TOKEN))
        assert created.status_code == 201, created.text
        run_id = created.json()["run_id"]
        bodies = [client.get(path, headers=bearer(ADMIN_TOKEN)).text
                  for path in (f"/v1/runs/{run_id}", f"/v1/runs/{run_id}/summary",
                               f"/v1/runs/{run_id}/summary?format=md", f"/v1/runs/{run_id}/rows",
                               "/v1/runs", f"/runs/{run_id}")]
    run_dir = settings.results_dir / run_id
    assert "alice:***@" in (run_dir / "manifest.json").read_text()
    assert "alice:***@" in (run_dir / "summary.md").read_text()
    assert "alice:***@" in bodies[0]
    for path in run_dir.rglob("*"):
        assert ENDPOINT_PASSWORD.encode() not in path.read_bytes(), path
    for body in bodies:
        assert ENDPOINT_PASSWORD not in body, body[:300]

    errors = []
    for bad in (
        {"llm_endpoints": authed, "llm_api_keys": f"http://bob:{ENDPOINT_PASSWORD}@x:1=key"},
        {"llm_endpoints": f"alice:{ENDPOINT_PASSWORD}@gpu1:8000"},
    ):
        with pytest.raises(ConfigError) as info:
            build_targets(make_settings(**bad))
        errors.append(str(info.value))
    for err in errors:
        assert ENDPOINT_PASSWORD not in err, err
    # the first names its URL redacted; the second, not a URL at all, is refused unnamed
    assert ":***@" in errors[0], errors[0]


def test_credentials_in_an_endpoint_url_and_an_api_key_are_refused_at_start(make_settings):
    """httpx cannot send both (every job failed, and the start-up probe blamed the key)."""
    from qfarm.common.errors import ConfigError
    from qfarm.worker.llm.pool import build_targets

    with pytest.raises(ConfigError, match=r"carries credentials in its URL and an API key") as info:
        build_targets(make_settings(llm_endpoints=f"http://alice:{ENDPOINT_PASSWORD}@gpu1:8000",
                                    llm_api_key="sk-0123456789abcdef"))  # fmt: skip
    assert ENDPOINT_PASSWORD not in str(info.value) and "sk-0123" not in str(info.value)
    assert len(build_targets(make_settings(llm_endpoints="http://gpu1:8000",
                                           llm_api_key="sk-0123456789abcdef"))) == 1
