"""Log lines: text or one JSON object per line, with the job's fields, secrets redacted."""

from __future__ import annotations

import io
import json
import logging

import pytest

from qfarm.common import logs
from qfarm.common.settings import Settings

SECRET = "sk-very-secret-key-123"


@pytest.fixture
def capture():
    """A logger writing through ``log_handler`` into a string, as an entry point installs it."""
    made: list[logging.Logger] = []

    def make(fmt: str, secrets: list[str]) -> tuple[logging.Logger, io.StringIO]:
        out = io.StringIO()
        logger = logging.getLogger(f"qfarm.test.{len(made)}.{fmt}")
        logger.handlers[:] = [logs.log_handler(out, fmt=fmt, secrets=secrets)]
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        made.append(logger)
        return logger, out

    yield make
    for logger in made:
        logger.handlers.clear()


def test_a_json_line_has_time_level_role_fields_and_message(capture) -> None:
    log, out = capture("json", [])
    logs.set_role("worker:gpu")
    log.warning("job %s ended", "j1", extra=logs.job_fields("r1", "j1", "http://gpu1:8000", "llm"))
    line = json.loads(out.getvalue())
    assert line["level"] == "warning" and line["role"] == "worker:gpu"
    assert (line["run_id"], line["job_id"], line["endpoint"], line["error_kind"]) == (
        "r1", "j1", "http://gpu1:8000", "llm")
    assert line["message"] == "job j1 ended" and line["time"].endswith("+00:00")
    logs.set_role("qfarm")


def test_a_traceback_stays_on_its_one_json_line(capture) -> None:
    log, out = capture("json", [])
    try:
        raise ValueError("line one\nline two")
    except ValueError:
        log.exception("failed")
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    assert "ValueError: line one\nline two" in json.loads(lines[0])["exc"]


def test_context_fields_fill_what_extra_does_not_name(capture) -> None:
    log, out = capture("text", [])
    with logs.log_context(run_id="r9", bundle="q1/quote#0..31"):
        log.info("bundle done")
        log.info("one job", extra={"job_id": "j3"})
    log.info("outside")
    first, second, third = out.getvalue().splitlines()
    assert "[run=r9 bundle=q1/quote#0..31]" in first
    assert "run=r9 job=j3 bundle=" in second
    assert "[" not in third


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_secrets_never_appear_in_messages_arguments_or_tracebacks(capture, fmt) -> None:
    log, out = capture(fmt, [SECRET, "tok"])  # too short a "secret" is left alone
    log.debug("key %s in args", SECRET)
    log.debug(f"key {SECRET} in the message, redis://:pw-in-url@h:6379/0 and ?password=hunter22")
    log.info("got it", extra={"endpoint": f"http://u:{SECRET}@gpu1:8000"})
    try:
        raise RuntimeError(f"Authorization: Bearer {SECRET}")
    except RuntimeError:
        log.exception("request failed")
    text = out.getvalue()
    assert SECRET not in text and "pw-in-url" not in text and "hunter22" not in text
    assert text.count("***") >= 6


def test_settings_name_every_secret_they_hold() -> None:
    settings = Settings(
        llm_endpoints="http://gpu1:8000,http://user:ep-pass@gpu2:8000",
        llm_api_key="key-one-12345", llm_api_keys="http://gpu1:8000=key-two-12345",
        api_tokens="ask:token-aaaaaaaaaaaaaaaa,token-bbbbbbbbbbbbbbbb",
        redis_url="redis://:redis-pass@127.0.0.1:6379/0", es_password="es-pass-1",
    )
    found = set(settings.secrets())
    assert {"key-one-12345", "key-two-12345", "token-aaaaaaaaaaaaaaaa",
            "token-bbbbbbbbbbbbbbbb", "redis-pass", "ep-pass", "es-pass-1"} <= found


def test_install_leaves_one_handler_and_quiets_chatty_libraries() -> None:
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    try:
        first = logs.log_handler(io.StringIO())
        logs.install(first, "debug")
        logs.install(second := logs.log_handler(io.StringIO()), "debug")
        assert root.handlers == [second] and root.level == logging.DEBUG
        assert logging.getLogger("matplotlib").level == logging.WARNING
    finally:
        root.handlers[:] = saved
        root.setLevel(level)


def test_bad_log_settings_name_their_variable() -> None:
    from qfarm.common.errors import ConfigError
    from qfarm.common.settings import load_settings

    with pytest.raises(ConfigError, match="QFARM_LOG_LEVEL"):
        load_settings(log_level="loud")
    with pytest.raises(ConfigError, match="QFARM_LOG_FORMAT"):
        load_settings(log_format="xml")
    with pytest.raises(ConfigError, match="QFARM_LLM_GPUS: entry 1"):
        load_settings(llm_endpoints="http://gpu1:8000", llm_gpus="http://gpu9:8000=2")
    assert load_settings(log_level="DEBUG").log_level == "debug"
