"""The endpoint probe sends each endpoint the key the gateway will send it."""

from __future__ import annotations

import pytest

from qfarm.common.errors import ConfigError
from qfarm.common.settings import Settings
from qfarm.ops.sim.launch import start_simulator
from qfarm.producer.api import configured_endpoints

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two_keyed_sims():
    with start_simulator(latency="zero", profile="clean", api_key="key-a") as a, \
            start_simulator(latency="zero", profile="clean", api_key="key-b") as b:
        yield a.url, b.url


def test_per_endpoint_keys_reach_each_endpoint(two_keyed_sims, tmp_path):
    a, b = two_keyed_sims
    settings = Settings(results_dir=tmp_path, llm_endpoints=f"{a},{b}",
                        llm_api_keys=f"{a}=key-a,{b}=key-b")
    with configured_endpoints(settings) as eps:
        assert eps.urls == [a, b]
        assert eps.simulated


def test_a_refused_key_is_a_config_error_naming_the_endpoint(two_keyed_sims, tmp_path):
    a, b = two_keyed_sims
    # One shared key fits only the first endpoint: every job sent to the second would fail.
    settings = Settings(results_dir=tmp_path, llm_endpoints=f"{a},{b}", llm_api_key="key-a")
    with pytest.raises(ConfigError) as info:
        with configured_endpoints(settings):
            pass
    assert f"{b} refused the API key (401)" in str(info.value)
    assert "key-a" not in str(info.value)


# ---------------------------------------------------------------- servers that are not the model's


@pytest.fixture(scope="module")
def plain_http_server(tmp_path_factory):
    """``python3 -m http.server``: answers GET with files and every POST with 501."""
    import socket
    import subprocess
    import sys
    import time

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    root = tmp_path_factory.mktemp("www")
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                            cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield url, root
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_plain_http_server_is_not_an_llm_endpoint(plain_http_server, tmp_path):
    url, _ = plain_http_server
    settings = Settings(results_dir=tmp_path, llm_endpoints=url)
    with pytest.raises(ConfigError) as info:
        with configured_endpoints(settings):
            pass
    msg = str(info.value)
    assert f"{url} is not an OpenAI-compatible server (GET /v1/models answered status 404)" in msg
    assert "\n" not in msg


def test_json_that_is_not_a_model_list_is_refused(plain_http_server, tmp_path):
    url, root = plain_http_server
    (root / "v1").mkdir(exist_ok=True)
    (root / "v1" / "models").write_text('{"models": ["x"]}')
    try:
        settings = Settings(results_dir=tmp_path, llm_endpoints=url)
        with pytest.raises(ConfigError, match='answered JSON without a "data" list'):
            with configured_endpoints(settings):
                pass
    finally:
        (root / "v1" / "models").unlink()


@pytest.fixture(scope="module")
def other_model_sim():
    with start_simulator(latency="zero", profile="clean", model="org/other-model",
                         served_model_names=("/models/other.gguf",)) as sim:
        yield sim.url


def test_an_endpoint_serving_another_model_lists_what_it_serves(other_model_sim, tmp_path):
    settings = Settings(results_dir=tmp_path, llm_endpoints=other_model_sim)
    with pytest.raises(ConfigError) as info:
        with configured_endpoints(settings):
            pass
    msg = str(info.value)
    assert (f"{other_model_sim} serves ['/models/other.gguf', 'org/other-model'], "
            f"not '{settings.model}': set QFARM_MODEL") in msg


def test_the_served_model_passes_and_is_seen_as_the_simulator(other_model_sim, tmp_path):
    settings = Settings(results_dir=tmp_path, llm_endpoints=other_model_sim,
                        model="/models/other.gguf")
    with configured_endpoints(settings) as eps:
        assert eps.urls == [other_model_sim]
        assert eps.simulated


def test_the_probe_error_never_shows_the_endpoint_password(other_model_sim, tmp_path):
    authed = other_model_sim.replace("http://", "http://alice:pw-s3cr3t@")
    settings = Settings(results_dir=tmp_path, llm_endpoints=authed)
    with pytest.raises(ConfigError) as info:
        with configured_endpoints(settings):
            pass
    assert "pw-s3cr3t" not in str(info.value)
    assert "alice:***@" in str(info.value)


def test_a_sweep_against_a_plain_http_server_fails_before_any_run(plain_http_server, tmp_path,
                                                                  default_index):
    """Before the probe checked the model list this sweep wrote two rows "answered 501",
    a summary "complete, 2 of 2" and exited 0."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    url, _ = plain_http_server
    questions = tmp_path / "q.txt"
    questions.write_text("What is jazz?\nWho wrote Hamlet?\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("QFARM_")}
    env.update(QFARM_LLM_ENDPOINTS=url, QFARM_INDEX_PATH=str(default_index),
               QFARM_RESULTS_DIR=str(tmp_path / "results"))
    qfarm = str(Path(sys.executable).parent / "qfarm")
    res = subprocess.run([qfarm, "sweep", str(questions), "--modes", "quote", "--eager", "--quiet"],
                         env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not an OpenAI-compatible server" in lines[0], res.stderr
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())
