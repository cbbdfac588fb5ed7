"""Bad flags, settings and input files: one `qfarm: error:` line, exit 2, nothing written."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from qfarm.common.errors import RetrievalError
from qfarm.worker.retrieval.embedded import EmbeddedRetriever

pytestmark = pytest.mark.slow  # each case starts the qfarm command

REPO = Path(__file__).resolve().parents[2]
QFARM = str(Path(sys.executable).parent / "qfarm")


@pytest.fixture
def run_qfarm(env):
    def run(*args: str, **extra_env: str) -> subprocess.CompletedProcess:
        return subprocess.run([QFARM, *args], cwd=REPO, env=env | extra_env, capture_output=True,
                              text=True, timeout=300)

    return run


def assert_one_line_error(res: subprocess.CompletedProcess, *needles: str) -> None:
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith("qfarm: error: "), res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    for needle in needles:
        assert needle in res.stderr, res.stderr


@pytest.mark.parametrize(
    ("flags", "needles"),
    [
        (["--policy", "title_boost=inf"], ["--policy title_boost", "0 < title_boost <= 100"]),
        (["--policy", "title_boost=NaN"], ["--policy title_boost", "finite"]),
        (["--policy", "temperature=-Infinity"], ["--policy temperature", "0.0 <= temperature"]),
    ],
)
def test_a_non_finite_policy_value_stops_the_sweep_before_anything_runs(
    run_qfarm, tmp_path, flags, needles
):
    (tmp_path / "q.txt").write_text("What is jazz?\n")
    res = run_qfarm("sweep", str(tmp_path / "q.txt"), "--eager", *flags)
    assert_one_line_error(res, *needles)
    assert not (tmp_path / "results").exists()


def test_serial_without_eager_is_refused_before_anything_runs(run_qfarm, tmp_path):
    (tmp_path / "q.txt").write_text("What is jazz?\n")
    res = run_qfarm("sweep", str(tmp_path / "q.txt"), "--serial", "--out", str(tmp_path / "results"))
    assert_one_line_error(res, "--serial", "--eager")
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    ("flags", "needle"),
    [(["--title-boost", "nan"], "--title-boost"), (["--title-boost", "inf"], "--title-boost"),
     (["--top-k", "0"], "--top-k")],
)
def test_search_refuses_what_the_policy_refuses(run_qfarm, flags, needle):
    assert_one_line_error(run_qfarm("search", "What is jazz?", *flags), needle, "allowed:")


@pytest.mark.parametrize("below", ["", "/run"])
def test_out_pointing_at_a_file_is_one_line_naming_the_flag(run_qfarm, tmp_path, below):
    (tmp_path / "q.txt").write_text("What is jazz?\n")
    (tmp_path / "taken").write_text("not a directory\n")
    res = run_qfarm("sweep", str(tmp_path / "q.txt"), "--eager", "--out", f"{tmp_path / 'taken'}{below}")
    assert_one_line_error(res, "--out", "is a file; expected a directory")
    assert (tmp_path / "taken").read_text() == "not a directory\n"


def test_garbage_per_endpoint_keys_are_one_line_naming_the_setting(run_qfarm, tmp_path):
    (tmp_path / "q.txt").write_text("What is jazz?\n")
    res = run_qfarm("sweep", str(tmp_path / "q.txt"), "--eager", QFARM_LLM_API_KEYS="garbage")
    assert_one_line_error(res, "QFARM_LLM_API_KEYS", "expected URL=KEY")
    assert "garbage" not in res.stderr  # the value may be a key: never echoed
    assert not (tmp_path / "results").exists()



BEATLES = "Who were the members of the Beatles?"


def damage_a_page_the_query_does_not_read(index: Path) -> None:
    """Overwrite one passages leaf page such that BEATLES still gets its evidence.

    That is the damage a query cannot notice: the command must find it anyway.
    """
    with sqlite3.connect(index) as conn:
        leaves = [r[0] for r in conn.execute(
            "SELECT pageno FROM dbstat WHERE name = 'passages' AND pagetype = 'leaf' ORDER BY pageno")]
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    pristine = index.read_bytes()
    for victim in leaves[len(leaves) // 2:]:
        index.write_bytes(pristine)
        with index.open("r+b") as f:
            f.seek((victim - 1) * page_size)
            f.write(b"\xa5" * page_size)
        try:
            if EmbeddedRetriever(index).search(BEATLES, top_k=8, title_boost=2.0):
                return
        except RetrievalError:  # this page was on the query's path; try the next
            continue
    raise AssertionError("no page could be damaged without the query noticing")


def test_search_and_sweep_refuse_a_damaged_index_naming_the_rebuild(run_qfarm, tmp_path, default_index):
    index = tmp_path / "index.sqlite"
    shutil.copy(default_index, index)
    assert run_qfarm("search", BEATLES, QFARM_INDEX_PATH=str(index)).returncode == 0
    damage_a_page_the_query_does_not_read(index)

    res = run_qfarm("search", BEATLES, QFARM_INDEX_PATH=str(index))
    assert res.returncode == 1 and res.stdout == "", res.stdout
    assert res.stderr.startswith(f"qfarm: error: embedded index {index} is damaged"), res.stderr
    assert "rebuild it with `qfarm index --force`" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1

    (tmp_path / "q.txt").write_text(BEATLES + "\n")
    sweep = run_qfarm("sweep", str(tmp_path / "q.txt"), "--eager", QFARM_INDEX_PATH=str(index))
    assert sweep.returncode == 1 and "rebuild it with `qfarm index --force`" in sweep.stderr
    assert not (tmp_path / "results").exists()

    rebuilt = run_qfarm("index", "--force", "--no-progress", QFARM_INDEX_PATH=str(index))
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert run_qfarm("search", BEATLES, QFARM_INDEX_PATH=str(index)).returncode == 0


def test_status_never_prints_a_redis_password_given_as_a_query_parameter(run_qfarm, own_redis):
    url = own_redis("--requirepass", "s3cr3t-pw", password="s3cr3t-pw")
    assert url.endswith("?password=s3cr3t-pw")
    res = run_qfarm("status", "no-such-run", QFARM_REDIS_URL=url)
    assert "run no-such-run: not found in Redis" in res.stderr, res.stderr
    assert "s3cr3t-pw" not in res.stderr and "password=***" in res.stderr
