"""The local model's launcher and what `--local-model` selects.

See docs/llm.md, 'A real model on this machine'. The server itself: the `local_model`
fixture (tests/conftest.py)."""

from __future__ import annotations

import argparse
import importlib.util

import httpx
import pytest

from qfarm import runtime
from qfarm.common.errors import ConfigError
from qfarm.common.models import ALL_MODES
from qfarm.common.policy import LOCAL_CPU_CONTEXT_CHARS, LOCAL_CPU_POLICY, Policy
from qfarm.ops.local import launch


def _args(*policy: str, local: bool, structured: bool = False) -> argparse.Namespace:
    return argparse.Namespace(policy=list(policy), no_quantifier_guard=False, allow_broad=False,
                              reject_broad=False, apply_quantifier_caps=False,
                              structured_output=structured, local_model=local)


def test_local_model_runs_take_the_cpu_policy_under_the_operators_overrides() -> None:
    policy = runtime.policy_from_args(_args("max_tokens=99", local=True))
    assert policy.top_k == LOCAL_CPU_POLICY["top_k"] < Policy().top_k
    for mode in ALL_MODES:
        assert policy.context_chars(mode) == LOCAL_CPU_CONTEXT_CHARS < Policy().context_chars(mode)
    assert policy.max_tokens == 99  # the operator's --policy wins
    assert runtime.policy_from_args(_args(local=False)) == Policy()
    assert runtime.policy_from_args(_args(local=True, structured=True)).structured_output


def test_a_missing_model_package_names_the_install_target(monkeypatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(launch.importlib.util, "find_spec",
                        lambda name, *a: None if name == launch.MODEL_PACKAGE else real(name, *a))
    with pytest.raises(ConfigError, match="make install-local"):
        launch.find_model_file()


def test_a_missing_model_file_is_one_line(tmp_path) -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("no local model: llama_cpp not installed (make install-local)")
    with pytest.raises(ConfigError, match="no such file"):
        launch.start_local_model(model_file=tmp_path / "nope.gguf")


def test_the_env_a_worker_needs_names_every_gateway_setting(tmp_path) -> None:
    handle = launch.LocalModelHandle(None, "http://127.0.0.1:9", tmp_path,  # type: ignore[arg-type]
                                     model="SmolLM2-135M-Instruct.Q4_1",
                                     model_file=tmp_path / "m.gguf", n_ctx=2048, version="0.3.36")
    env = handle.env()
    assert env["QFARM_LLM_ENDPOINTS"] == "http://127.0.0.1:9"
    assert env["QFARM_MODEL"] == "SmolLM2-135M-Instruct.Q4_1"
    assert env["QFARM_LLM_MAX_INFLIGHT_PER_ENDPOINT"] == "1"
    assert env["QFARM_LLM_CONTEXT_WINDOW"] == "2048"
    assert env["QFARM_LLM_METRICS_WEIGHTING"] == "false"
    from qfarm.common.settings import Settings, load_settings

    for key in env:  # every name is a real setting, every value parses
        assert key.removeprefix("QFARM_").lower() in Settings.model_fields
    settings = load_settings(**handle.settings_overrides())
    assert settings.llm_max_inflight_per_endpoint == 1 and settings.llm_context_window == 2048
    assert "CPU, local" in handle.description and "llama.cpp" in handle.description


@pytest.mark.slow
def test_the_server_lists_the_model_under_its_alias(local_model) -> None:
    resp = httpx.get(f"{local_model.url}/v1/models", timeout=30)
    assert resp.status_code == 200
    assert [m["id"] for m in resp.json()["data"]] == [local_model.model]
    assert local_model.model == launch.model_alias(launch.find_model_file())
