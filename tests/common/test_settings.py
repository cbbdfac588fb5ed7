"""Settings fail at start-up with one line naming the variable and the expected form."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.errors import ConfigError
from common.settings import api_keys_by_endpoint, load_settings

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
