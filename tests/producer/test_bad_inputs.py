"""Every bad input the farm has been shown, through the real `qfarm` command.

Each case runs the console script as a subprocess against a real Redis database and a
live simulator (so a distributed sweep would get as far as enqueueing), and asserts what
an operator is promised: a non-zero exit, exactly one `qfarm: error:` line on stderr and
no traceback, nothing enqueued in Redis, and no run directory left under
QFARM_RESULTS_DIR. Sweeps run distributed with --detach (they return once enqueued, so
a bad input that slips through shows as keys in Redis and a run directory, not a hang)
unless the case says --eager.

A new bad input found in the field is one more row in CASES.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from .conftest import REPO, TEST_PORT, VENV_BIN

pytestmark = pytest.mark.slow  # each case starts the qfarm command

DB = int(os.environ.get("QFARM_TEST_BAD_INPUT_REDIS_DB", "11"))
REDIS_URL = f"redis://127.0.0.1:{TEST_PORT}/{DB}"
GOOD = "What is jazz?\n"
TOKEN = "t" * 24  # long enough to pass the length rule: only its scope is wrong


@dataclass(frozen=True)
class Case:
    """``argv`` after ``qfarm``; ``{dir}`` in it is the test's directory. ``files`` are
    written there first (str as UTF-8, bytes as given); ``env`` is added (``{dir}`` too)."""

    id: str
    argv: tuple[str | bytes, ...]
    needle: str  # in the error line
    files: dict[str, str | bytes] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    exit_code: int = 2


def sweep(*flags: str, file: str = "q.txt") -> tuple[str, ...]:
    return ("sweep", "{dir}/" + file, "--detach", "--quiet", *flags)


def eager_sweep(*flags: str, file: str = "q.txt") -> tuple[str, ...]:
    return ("sweep", "{dir}/" + file, "--eager", "--quiet", *flags)


def jsonl(**fields: object) -> str:
    return json.dumps(fields) + "\n"


def setting(name: str, value: str, needle: str = "") -> Case:
    """A bad QFARM_* value: the sweep stops at start-up, naming the variable."""
    return Case(f"{name}={value[:40]}", sweep(), needle or name, {"q.txt": GOOD}, {name: value})


CASES = [
    # ---- what a shell can pass for a question file, and outputs that cannot be written
    Case("/dev/zero as the question file", ("sweep", "/dev/zero", "--detach", "--quiet"),
         "/dev/zero: not a regular file"),
    Case("a CSV header line", sweep(), "q.txt:1: 'question' looks like a table's header",
         {"q.txt": "question\nWhat is jazz?\n"}),
    Case("--json-file in a missing folder", sweep("--json-file", "{dir}/missing/out.json"),
         "missing/out.json: no such folder", {"q.txt": GOOD}),
    Case("--out under /proc", sweep("--out", "/proc/1"), "--out /proc/1: cannot create folders",
         {"q.txt": GOOD}),
    Case("an empty search", ("search", ""), "the question is empty"),
    Case("a simulator port out of range", ("sim", "--port", "70000"), "--port 70000: a TCP port"),
    # ---- question files: each refused at load time with file:line
    Case("lone surrogate in a question", sweep(file="q.jsonl"), "q.jsonl:2: the question holds a lone surrogate",
         {"q.jsonl": jsonl(id="a", question="What is jazz?") + '{"id": "b", "question": "What is \\ud800 jazz?"}\n'}),
    Case("lone surrogate in a question, eager", eager_sweep(file="q.jsonl"), "q.jsonl:1: the question holds a lone surrogate",
         {"q.jsonl": '{"id": "b", "question": "What is \\udfff jazz?"}\n'}),
    Case("lone-surrogate id", sweep(file="q.jsonl"), 'q.jsonl:1: "id" holds a lone surrogate',
         {"q.jsonl": '{"id": "\\ud800", "question": "What is jazz?"}\n'}),
    Case("lone-surrogate id, eager", eager_sweep(file="q.jsonl"), 'q.jsonl:1: "id" holds a lone surrogate',
         {"q.jsonl": '{"id": "\\ud800", "question": "What is jazz?"}\n'}),
    Case("lone surrogate in an answer", sweep(file="q.jsonl"), "q.jsonl:1: answer 2 holds a lone surrogate",
         {"q.jsonl": '{"id": "a", "question": "What is jazz?", "answers": ["ok", "\\ud800"]}\n'}),
    Case("5,000-digit id", sweep(file="q.jsonl"), "q.jsonl:1: a JSON number too long to read",
         {"q.jsonl": '{"id": ' + "9" * 5000 + ', "question": "What is jazz?"}\n'}),
    Case("300-character id", sweep(file="q.jsonl"), 'q.jsonl:1: "id" is 300 characters; at most',
         {"q.jsonl": jsonl(id="x" * 300, question="What is jazz?")}),
    Case("JSON nested 100,000 deep", sweep(file="q.jsonl"), "q.jsonl:1: JSON nested too deeply",
         {"q.jsonl": "[" * 100_000 + "]" * 100_000 + "\n"}),
    Case("JSON nested 100,000 deep inside an object", sweep(file="q.jsonl"), "q.jsonl:1: JSON nested too deeply",
         {"q.jsonl": '{"id": "a", "question": "q", "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n"}),
    Case("10 MB question", sweep(), "q.txt:1: the question is 10,000,014 characters; at most 2,000",
         {"q.txt": "What is jazz " + "x" * 10_000_000 + "?\n"}),
    Case("question over a lowered limit", sweep(), "q.txt:2: the question is 13 characters; at most 12",
         {"q.txt": "Who is Bob?\nWhat is jazz?\n"}, {"QFARM_MAX_QUESTION_CHARS": "12"}),
    Case("NUL in a text question", sweep(), "q.txt:1: the question holds a control character (U+0000)",
         {"q.txt": "What is\x00 jazz?\n"}),
    Case("NUL in a JSONL question", sweep(file="q.jsonl"), "q.jsonl:1: the question holds a control character (U+0000)",
         {"q.jsonl": '{"id": "a", "question": "What is\\u0000 jazz?"}\n'}),
    Case("escape character in a question", eager_sweep(), "q.txt:1: the question holds a control character (U+001B)",
         {"q.txt": "What is \x1b[31mjazz?\n"}),
    Case("malformed JSON", sweep(file="q.jsonl"), "q.jsonl:1: malformed JSON", {"q.jsonl": '{"id": 1,\n'}),
    Case("JSON that is not an object", sweep(file="q.jsonl"), "q.jsonl:1: expected a JSON object", {"q.jsonl": "[1]\n"}),
    Case("infinite id", sweep(file="q.jsonl"), 'q.jsonl:1: "id" must be', {"q.jsonl": '{"id": Infinity, "question": "q"}\n'}),
    Case("duplicate ids", sweep(file="q.jsonl"), "duplicate question id",
         {"q.jsonl": jsonl(id="a", question="What?") + jsonl(id="a", question="Who?")}),
    Case("no questions", sweep(), "no questions found", {"q.txt": "# only a comment\n"}),
    Case("not UTF-8", sweep(), "q.txt:2: not UTF-8 text", {"q.txt": b"What is jazz?\nWhat is \xff?\n"}),
    Case("no such question file", sweep(file="missing.txt"), "no such question file"),
    Case("a directory as question file", ("sweep", "{dir}", "--detach"), "is a directory"),
    # ---- flags
    Case("-n 0", sweep("-n", "0"), "-n 0", {"q.txt": GOOD}),
    Case("unknown mode", sweep("--modes", "quote,poem"), "poem", {"q.txt": GOOD}),
    Case("policy title_boost=inf", sweep("--policy", "title_boost=inf"), "--policy title_boost", {"q.txt": GOOD}),
    Case("policy title_boost=NaN", sweep("--policy", "title_boost=NaN"), "finite", {"q.txt": GOOD}),
    Case("policy temperature=-Infinity", sweep("--policy", "temperature=-Infinity"), "--policy temperature",
         {"q.txt": GOOD}),
    Case("unknown policy key", sweep("--policy", "top_kk=3"), "top_kk", {"q.txt": GOOD}),
    Case("--serial without --eager", sweep("--serial"), "--serial", {"q.txt": GOOD}),
    Case("--out is a file", sweep("--out", "{dir}/taken"), "--out", {"q.txt": GOOD, "taken": "x"}),
    Case("ask --timeout -1", ("ask", "What is jazz?", "--eager", "--timeout", "-1"), "--timeout -1"),
    Case("ask --timeout nan", ("ask", "What is jazz?", "--eager", "--timeout", "nan"), "--timeout nan"),
    Case("ask with a 100,000-character question", ("ask", "x" * 100_000, "--eager"),
         "the question is 100,000 characters; at most 2,000"),
    # Arguments that are not UTF-8 reach Python as lone surrogates (surrogateescape).
    Case("ask with a lone surrogate", ("ask", b"What is \xff?", "--eager"), "holds a lone surrogate (U+DCFF)"),
    Case("ask with an empty question", ("ask", "  ", "--eager"), "the question is empty"),
    Case("compare --floor nan", ("compare", "{dir}/a", "{dir}/b", "--floor", "nan"), "--floor nan"),
    Case("compare --floor inf", ("compare", "{dir}/a", "{dir}/b", "--floor", "inf"), "--floor inf"),
    Case("compare --floor -1", ("compare", "{dir}/a", "{dir}/b", "--floor", "-1"), "--floor -1"),
    Case("serve --port 70000", ("serve", "--port", "70000"), "--port 70000"),
    Case("serve --port -1", ("serve", "--port", "-1"), "--port -1"),
    Case("view --port 70000", ("view", "{dir}", "--port", "70000"), "--port 70000"),
    Case("view --port -1", ("view", "{dir}", "--port", "-1"), "--port -1"),
    Case("search --top-k 0", ("search", "What is jazz?", "--top-k", "0"), "--top-k"),
    Case("search --title-boost nan", ("search", "What is jazz?", "--title-boost", "nan"), "--title-boost"),
    # ---- settings: one line naming the variable, at start-up
    # URLs of the live test server that redis-py reads and Celery's broker (kombu) refuses:
    # they used to pass the producer's check, then kill the sweep in the middle.
    setting("QFARM_REDIS_URL", f"redis://127.0.0.1:{TEST_PORT}/abc", "QFARM_REDIS_URL: the path must be the database number"),
    setting("QFARM_REDIS_URL", f"{REDIS_URL}?db={DB}", "QFARM_REDIS_URL: query parameter 'db'"),
    setting("QFARM_REDIS_URL", f"{REDIS_URL}?socket_timeout=5", "QFARM_BROKER_SOCKET_TIMEOUT_S"),
    setting("QFARM_REDIS_URL", "unix:///run/redis.sock", "QFARM_REDIS_URL: unix://"),
    setting("QFARM_REDIS_URL", "redis://:pw@127.0.0.1:1/0?password=pw", "the password is given twice"),
    setting("QFARM_LLM_ENDPOINTS", "http://[::1", "QFARM_LLM_ENDPOINTS: entry 1 is not a URL"),
    setting("QFARM_LLM_ENDPOINTS", "http://127.0.0.1:99999", "QFARM_LLM_ENDPOINTS: entry 1 is not a URL"),
    setting("QFARM_VISIBILITY_TIMEOUT_S", "0"),
    setting("QFARM_VISIBILITY_TIMEOUT_S", "-5"),
    setting("QFARM_LLM_TIMEOUT_S", "nan", "QFARM_LLM_TIMEOUT_S: Input should be a finite number"),
    setting("QFARM_LLM_TIMEOUT_S", "-1"),
    setting("QFARM_LLM_CONNECT_TIMEOUT_S", "inf"),
    setting("QFARM_LLM_MAX_ATTEMPTS", "0"),
    setting("QFARM_LLM_MAX_INFLIGHT_PER_ENDPOINT", "0"),
    setting("QFARM_LLM_BATCH_SIZE", "5000", "QFARM_LLM_BATCH_SIZE: Input should be less than or equal to 1024"),
    setting("QFARM_BUNDLE_SIZE", "0"),
    setting("QFARM_BROKER_SOCKET_TIMEOUT_S", "0"),
    setting("QFARM_MAX_QUESTION_CHARS", "0"),
    setting("QFARM_API_TOKENS", f"root:{TOKEN}", "QFARM_API_TOKENS: entry 1 has an unknown scope"),
    setting("QFARM_API_TOKENS", "short", "QFARM_API_TOKENS: entry 1 has a token of fewer than 16"),
    setting("QFARM_LLM_API_KEYS", "garbage", "QFARM_LLM_API_KEYS: entry 1 is not URL=KEY"),
    Case("QFARM_DATA_DIR is a file", sweep(), "QFARM_DATA_DIR: ", {"q.txt": GOOD, "data": "x"},
         {"QFARM_DATA_DIR": "{dir}/data"}),
    Case("QFARM_RESULTS_DIR below a file", sweep(), "QFARM_RESULTS_DIR: ", {"q.txt": GOOD, "taken": "x"},
         {"QFARM_RESULTS_DIR": "{dir}/taken/results"}),
]


@pytest.fixture(scope="module")
def db() -> redis.Redis:
    return redis.Redis.from_url(REDIS_URL)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_and_leaves_nothing_behind(
    case: Case, tmp_path: Path, db: redis.Redis, default_index: Path, simulator_url: str
) -> None:
    for name, content in case.files.items():
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    results = tmp_path / "results"
    env = {k: v for k, v in os.environ.items() if not k.startswith("QFARM_")}
    env.update(QFARM_REDIS_URL=REDIS_URL, QFARM_LLM_ENDPOINTS=simulator_url,
               QFARM_INDEX_PATH=str(default_index), QFARM_RESULTS_DIR=str(results))
    env.update({k: v.replace("{dir}", str(tmp_path)) for k, v in case.env.items()})
    argv = [a.replace("{dir}", str(tmp_path)) if isinstance(a, str) else a for a in case.argv]
    db.flushdb()
    try:
        res = subprocess.run([str(VENV_BIN / "qfarm"), *argv], cwd=REPO, env=env,
                             capture_output=True, timeout=300)
        keys = db.keys("*")
    finally:
        db.flushdb()
    stderr = res.stderr.decode("utf-8", "replace")
    assert res.returncode == case.exit_code, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("qfarm: error: "), stderr[-3000:]
    assert case.needle in lines[0], lines[0]
    assert res.stdout == b""
    assert keys == [], f"enqueued or written to Redis: {keys[:5]}"
    run_dirs = [p for p in results.rglob("*") if p.is_dir()] if results.is_dir() else []
    assert run_dirs == [], f"run directories left behind: {run_dirs}"


def test_a_fifo_is_refused_instead_of_read_forever(tmp_path: Path) -> None:
    fifo = tmp_path / "questions"
    os.mkfifo(fifo)
    env = {k: v for k, v in os.environ.items() if not k.startswith("QFARM_")}
    res = subprocess.run([str(VENV_BIN / "qfarm"), "sweep", str(fifo), "--eager", "--quiet"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode == 2 and "not a regular file" in res.stderr, res.stderr


def test_a_raised_question_limit_holds_for_question_files(tmp_path: Path, default_index: Path) -> None:
    question = "Who wrote " + "a very long question " * 120 + "?"  # 2,531 characters
    (tmp_path / "q.txt").write_text(question + "\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("QFARM_")}
    env.update(QFARM_MAX_QUESTION_CHARS="3000", QFARM_INDEX_PATH=str(default_index),
               QFARM_RESULTS_DIR=str(tmp_path / "results"))
    res = subprocess.run([str(VENV_BIN / "qfarm"), "sweep", str(tmp_path / "q.txt"), "--eager",
                          "--quiet", "--modes", "quote"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr
