"""Grounding at the command line: the preflight lines of `qfarm ask` and the reject-broad
false-positive rate of a sweep over the bounded-universal set (eager, simulator, embedded index)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
QFARM = str(Path(sys.executable).parent / "qfarm")


def qfarm(env, *args):
    return subprocess.run(
        [QFARM, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )


def test_ask_prints_the_reject_audit_line_then_how_to_narrow(env):
    res = qfarm(
        env, "ask", "Which songs did all rock bands record?", "--mode", "claim_lattice_pointer",
        "--eager", "--reject-broad",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "BROAD-QUANTIFIER PREFLIGHT REJECTED · scope unbounded"
    assert lines[1].startswith(
        'UNGROUNDED · via BROAD_QUANTIFIER_REJECTED · ALL ("all") · cap was 8  0/0  '
    )
    assert lines[1].endswith("(preflight)")
    assert "Narrow the question" in lines[2] and "--allow-broad" in lines[2]


def test_sweep_with_reject_broad_reports_the_false_positive_rate(env):
    res = qfarm(
        env, "sweep", "bench/questions/bounded_universal.jsonl", "--modes",
        "quote,claim_lattice_pointer", "-n", "1", "--eager", "--quiet", "--reject-broad",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    paths = dict(line.split(":", 1) for line in res.stdout.strip().splitlines())
    rows_path = Path(paths["rows"].split("(")[0].strip())
    rows = [json.loads(line) for line in rows_path.read_text().splitlines()]
    pointer = [r for r in rows if r["mode"] == "claim_lattice_pointer"]
    rejected = sum("BROAD_QUANTIFIER_REJECTED" in r["violation_kinds"] for r in pointer)
    assert all(r["question_scope"] == "bounded" for r in rows)
    summary = Path(paths["summary"].strip()).read_text()
    section = summary.split("## Reject-broad false positives", 1)[1].split("\n## ", 1)[0]
    assert f"| `claim_lattice_pointer` | {len(pointer)} | {rejected} | " in section
    # quote mode is not guarded by default: reject-broad never fires there
    assert "| `quote` | 14 | 0 | 0.0% [" in section
