"""The README's Python example, run exactly as written (eager, a real simulator, the real index)."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_example() -> str:
    section = README.read_text(encoding="utf-8").split("## From Python", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "README.md: no python block under '## From Python'"
    return match.group(1)


def test_the_readme_example_runs_and_prints_each_modes_strict_rate(
    monkeypatch, tmp_path, default_index
):
    for name in ("QFARM_LLM_ENDPOINTS", "QFARM_REDIS_URL", "QFARM_RETRIEVER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("QFARM_INDEX_PATH", str(default_index))
    monkeypatch.setenv("QFARM_RESULTS_DIR", str(tmp_path / "results"))
    out = io.StringIO()
    scope: dict = {}
    with contextlib.redirect_stdout(out):
        exec(compile(readme_example(), str(README), "exec"), scope)
    result = scope["result"]
    assert result.status == "complete" and result.rows_written == 12
    # The printed rates are the ones rows.jsonl gives, read independently of the API.
    rows = [json.loads(line) for line in result.rows_path.read_text().splitlines()]
    assert len(rows) == 12 and not any(r["error"] for r in rows)
    expected = {}
    for mode in ("claim_lattice", "quote"):
        mine = [r for r in rows if r["mode"] == mode]
        expected[mode] = sum(r["verdict"] == "STRICT" for r in mine) / len(mine)
    printed = dict(line.split() for line in out.getvalue().splitlines())
    assert {m: float(v) for m, v in printed.items()} == expected
    assert (result.run_dir / "summary.md").exists() and result.summary == result.run_dir / "summary.md"
