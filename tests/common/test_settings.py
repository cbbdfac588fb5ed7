"""Settings fail at start-up with one line naming the variable and the expected form."""

from __future__ import annotations

from pathlib import Path

import pytest

from qfarm.common.errors import ConfigError
from qfarm.common.settings import api_keys_by_endpoint, load_settings

SECRET = "sk-9f8e7d6c5b4a"


@pytest.mark.parametrize(
    ("endpoints", "keys", "message"),
    [
        ("http://gpu1:8000", "garbage", "entry 1 is not URL=KEY; expected URL=KEY,URL=KEY"),
        ("http://gpu1:8000", SECRET, "entry 1 is not URL=KEY"),
        ("http://gpu1:8000", f"{SECRET}=http://gpu1:8000", "entry 1 is not URL=KEY"),  # swapped
        ("http://gpu1:8000", "http://gpu1:8000=", "entry 1 is not URL=KEY"),
        ("http://gpu1:8000", f"http://gpu1:8000={SECRET},junk", "entry 2 is not URL=KEY"),
        ("http://gpu1:8000", f"http://gpu2:8000={SECRET}", "names http://gpu2:8000, which is not in"),
        ("", f"http://gpu1:8000={SECRET}", "not in QFARM_LLM_ENDPOINTS (empty)"),
    ],
)
def test_bad_per_endpoint_keys_fail_at_load_without_echoing_a_key(
    monkeypatch: pytest.MonkeyPatch, endpoints: str, keys: str, message: str
) -> None:
    monkeypatch.setenv("QFARM_LLM_ENDPOINTS", endpoints)
    monkeypatch.setenv("QFARM_LLM_API_KEYS", keys)
    with pytest.raises(ConfigError) as info:
        load_settings()
    text = str(info.value)
    assert text.startswith("QFARM_LLM_API_KEYS: ") and message in text, text
    assert SECRET not in text and "\n" not in text


def test_good_per_endpoint_keys_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QFARM_LLM_ENDPOINTS", "http://gpu1:8000/, http://gpu2:8000")
    monkeypatch.setenv("QFARM_LLM_API_KEYS", f"http://gpu1:8000={SECRET}, http://gpu2:8000/=k2")
    settings = load_settings()
    raw = settings.llm_api_keys.get_secret_value() if settings.llm_api_keys else None
    assert api_keys_by_endpoint(raw, settings.endpoints) == {
        "http://gpu1:8000": SECRET,
        "http://gpu2:8000": "k2",
    }


@pytest.mark.parametrize("below", ["", "sub/dir"])
def test_a_results_dir_that_is_a_file_fails_at_load(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, below: str
) -> None:
    blocker = tmp_path / "results"
    blocker.write_text("")
    monkeypatch.setenv("QFARM_RESULTS_DIR", str(blocker / below))
    with pytest.raises(ConfigError, match=rf"QFARM_RESULTS_DIR: {blocker} is a file; expected a directory"):
        load_settings()


def test_a_results_dir_that_does_not_exist_yet_is_fine(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("QFARM_RESULTS_DIR", str(tmp_path / "new" / "results"))
    assert load_settings().results_dir == tmp_path / "new" / "results"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("QFARM_VISIBILITY_TIMEOUT_S", "0", "greater than or equal to 1"),
        ("QFARM_VISIBILITY_TIMEOUT_S", "-3", "greater than or equal to 1"),
        ("QFARM_BROKER_SOCKET_TIMEOUT_S", "0", "greater than 0"),
        ("QFARM_LLM_TIMEOUT_S", "nan", "finite number"),
        ("QFARM_LLM_TIMEOUT_S", "inf", "finite number"),
        ("QFARM_LLM_TIMEOUT_S", "-1", "greater than 0"),
        ("QFARM_LLM_CONNECT_TIMEOUT_S", "0", "greater than 0"),
        ("QFARM_LLM_MAX_ATTEMPTS", "0", "greater than or equal to 1"),
        ("QFARM_LLM_MAX_INFLIGHT_PER_ENDPOINT", "0", "greater than or equal to 1"),
        ("QFARM_LLM_BATCH_SIZE", "5000", "less than or equal to 1024"),
        ("QFARM_LLM_BATCH_SIZE", "-1", "greater than or equal to 0"),
        ("QFARM_LLM_BATCH_WAIT_MS", "nan", "finite number"),
        ("QFARM_LLM_BREAKER_FAILURES", "0", "greater than or equal to 1"),
        ("QFARM_LLM_BACKOFF_MAX_S", "-1", "greater than or equal to 0"),
        ("QFARM_LLM_HEALTH_INTERVAL_S", "inf", "finite number"),
        ("QFARM_REDIS_RECONNECT_S", "nan", "finite number"),
        ("QFARM_MAX_QUESTION_CHARS", "0", "greater than or equal to 1"),
        ("QFARM_API_MAX_QUESTION_CHARS", "0", "greater than or equal to 1"),
        ("QFARM_API_MAX_WAIT_S", "inf", "finite number"),
        ("QFARM_METRICS_FLUSH_S", "-1", "greater than or equal to 0"),
        ("QFARM_ES_TIMEOUT_S", "0", "greater than 0"),
        ("QFARM_ES_SHARDS", "0", "greater than or equal to 1"),
        ("QFARM_MODEL", "", "at least 1 character"),
        ("QFARM_BUNDLE_SIZE", "257", "less than or equal to 256"),
    ],
)
def test_every_setting_out_of_its_range_fails_at_load_naming_it(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, message: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    text = str(info.value)
    assert text.startswith("QFARM_") and message in text and "\n" not in text, text
    assert name.removeprefix("QFARM_API_") in text  # the old name of the question limit says the new


def test_the_question_limit_has_one_setting_under_both_names(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().max_question_chars == 2000
    monkeypatch.setenv("QFARM_API_MAX_QUESTION_CHARS", "300")
    assert load_settings().max_question_chars == 300
    monkeypatch.setenv("QFARM_MAX_QUESTION_CHARS", "400")
    assert load_settings().max_question_chars == 400


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        (f"root:{'r' * 20}", "entry 1 has an unknown scope"),
        (f"ask:{'a' * 20},Admin:{'b' * 20}", "entry 2 has an unknown scope"),
        ("admin:short", "entry 1 has a token of fewer than 16 characters"),
    ],
)
def test_an_api_token_with_an_unknown_scope_is_an_error_not_an_admin_token(
    monkeypatch: pytest.MonkeyPatch, tokens: str, message: str
) -> None:
    monkeypatch.setenv("QFARM_API_TOKENS", tokens)
    with pytest.raises(ConfigError, match=f"QFARM_API_TOKENS: {message}") as info:
        load_settings()
    assert "r" * 20 not in str(info.value) and "b" * 20 not in str(info.value)


def test_known_scopes_and_bare_tokens_still_load(monkeypatch: pytest.MonkeyPatch) -> None:
    from qfarm.common.settings import api_tokens_by_scope

    raw = f"{'x' * 20},ask:{'a' * 20},admin:{'b' * 20}"
    assert api_tokens_by_scope(raw) == {"x" * 20: "admin", "a" * 20: "ask", "b" * 20: "admin"}


@pytest.mark.parametrize(
    ("endpoints", "message"),
    [
        ("http://[::1", "entry 1 is not a URL (Invalid IPv6 URL)"),
        ("http://a:1,http://b:99999", "entry 2 is not a URL (Port out of range"),
        ("gpu1:8000", "entry 1 is not an http(s) base URL 'gpu1:8000'; write e.g. http://gpu1:8000"),
        ("http://user:s3cr3t@:8000", "entry 1 is not an http(s) base URL; write e.g. http://gpu1:8000"),
    ],
)
def test_an_endpoint_that_is_not_a_url_fails_at_load(
    monkeypatch: pytest.MonkeyPatch, endpoints: str, message: str
) -> None:
    monkeypatch.setenv("QFARM_LLM_ENDPOINTS", endpoints)
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert str(info.value).startswith("QFARM_LLM_ENDPOINTS: ") and message in str(info.value)
    assert "s3cr3t" not in str(info.value)


def test_a_data_dir_that_is_a_file_fails_at_load(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "data").write_text("")
    monkeypatch.setenv("QFARM_DATA_DIR", str(tmp_path / "data"))
    with pytest.raises(ConfigError, match=f"QFARM_DATA_DIR: {tmp_path / 'data'} is a file"):
        load_settings()
