"""Reports on disk: summary.md + plots, compare.md + plot, run lookup, CLI, bounded memory."""

from __future__ import annotations

import gc
import json
import re
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from qfarm.cli import main
from qfarm.common.errors import InputError
from qfarm.common.models import Manifest
from qfarm.common.policy import Policy, build_policy, governance_policy_hash, verifier_policy_hash
from qfarm.common.reporting.report import render_stats
from qfarm.producer.reports.compare import check_floor, compare_dirs, write_comparison
from qfarm.producer.reports.rows import read_stats, resolve_run
from qfarm.producer.reports.summary import LATENCY_PLOT, STRICT_PLOT, write_summary

MODES = ("quote", "claim_lattice_pointer", "claim_lattice")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_run(
    root: Path,
    run_id: str,
    *,
    policy: Policy | None = None,
    n_questions: int = 4,
    n: int = 3,
    strict_every: int = 2,
    digest: str = "sha256:1111",
) -> Path:
    policy = policy or Policy()
    run_dir = root / run_id
    run_dir.mkdir(parents=True)
    man = Manifest(
        run_id=run_id,
        created_at=1_700_000_000.0,
        question_file="bench/questions/smoke.txt",
        question_file_digest=digest,
        n_questions=n_questions,
        modes=MODES,
        n=n,
        n_jobs=n_questions * len(MODES) * n,
        policy=policy,
        verifier_policy_hash=verifier_policy_hash(policy),
        governance_policy_hash=governance_policy_hash(policy),
        model="adamo1139/Hermes-3-Llama-3.1-8B-FP8-Dynamic",
        model_profile_id="hermes-3-8b",
        simulated=True,
    )
    (run_dir / "manifest.json").write_text(man.model_dump_json())
    with (run_dir / "rows.jsonl").open("w") as fh:
        for k, row in enumerate(rows_for(run_id, n_questions, n)):
            row["verdict"] = "STRICT" if k % strict_every == 0 else "UNGROUNDED"
            fh.write(json.dumps(row) + "\n")
    return run_dir


def rows_for(run_id: str, n_questions: int, n: int) -> Iterator[dict[str, Any]]:
    """Rows shaped like real ones (every field of docs/grounding.md, 'The row'), generated lazily."""
    k = 0
    for q in range(n_questions):
        for mode in MODES:
            for i in range(n):
                k += 1
                yield {
                    "schema_version": 1,
                    "run_id": run_id,
                    "job_id": f"job{k:08d}",
                    "question": f"What is the capital of country number {q}?",
                    "question_id": f"q{q:06d}",
                    "mode": mode,
                    "sample_index": i,
                    "verdict": "STRICT",
                    "label": "EVIDENCE-WARRANTED",
                    "ratio": 1.0,
                    "n_claims": 2,
                    "n_verified": 2,
                    "violation_kinds": ["TITLE_MISMATCH"] if k % 5 == 0 else [],
                    "format_collapsed": False,
                    "answer_brackets": 2,
                    "answer_pointer_count": 2,
                    "answer_chars_with_brackets": 12,
                    "raw_meaningful_line_count": 2,
                    "quantifier_intensity": "SINGULAR",
                    "quantifier_matched_token": "what is",
                    "quantifier_explicit_count": None,
                    "scope_bound_hint": "unknown",
                    "claim_cap_applied": 1,
                    "model_profile_id": "adamo1139/Hermes-3-Llama-3.1-8B-FP8-Dynamic",
                    "model_profile_key": "hermes-3-8b",
                    "model": "adamo1139/Hermes-3-Llama-3.1-8B-FP8-Dynamic",
                    "endpoint": f"http://127.0.0.1:{8000 + k % 4}",
                    "simulated": True,
                    "evidence_ids": [f"E{j}" for j in range(1, 9)],
                    "top_doc_titles": ["Paris", "France", "Capital city", "Europe", "Seine"],
                    "top_scores": [12.5, 11.25, 10.0, 9.5, 9.0, 8.5, 8.0, 7.5],
                    "answerability": None,
                    "gold_in_claims": k % 3 == 0,
                    "gold_in_evidence": True,
                    "verifier_policy_hash": "0123456789abcdef",
                    "governance_policy_hash": "fedcba9876543210",
                    "cache_hit": False,
                    "attempts": 1 + (k % 17 == 0),
                    "error": "cancelled" if k % 101 == 0 else None,
                    "timings": {
                        "queue_wait_ms": float(k % 50),
                        "retrieval_ms": 2.0 + k % 3,
                        "llm_ms": 100.0 + (k * 7919) % 900,
                        "verify_ms": 1.0,
                        "total_ms": 110.0 + (k * 7919) % 900,
                    },
                    "usage": {"prompt_tokens": 1200 + k % 100, "completion_tokens": 60 + k % 40},
                    "llm_request": {"sent_at": 1_700_000_000.0 + k / 100,
                                    "ms": 100.0 + (k * 7919) % 900, "prompts": 1},
                    "worker": "w1",
                    "started_at": 1_700_000_000.0 + k / 100,
                    "finished_at": 1_700_000_000.5 + k / 100,
                }


def test_write_summary_writes_markdown_and_plots(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path, "run1")
    (run_dir / "status.json").write_text(
        json.dumps({"status": "complete", "finished_at": 1_700_000_030.0})
    )
    path = write_summary(run_dir)
    assert path == run_dir / "summary.md"
    text = path.read_text()
    for section in (
        "## Verdicts by mode",
        "## Format collapse and violation kinds",
        "## Gold answers",
        "## Answerability warnings",
        "## Per question",
        "## Quantifier preflight",
        "## Errors and retries",
        "## Stage timings",
    ):
        assert section in text
    assert "| rows | 36 of 36 expected |" in text
    assert "| status | complete |" in text
    assert "| wall time | 30.0 s |" in text  # from status.json
    for name in (STRICT_PLOT, LATENCY_PLOT):
        assert (run_dir / name).read_bytes()[:8] == PNG_MAGIC
        assert f"]({name})" in text
    assert not list(run_dir.glob("*.tmp"))


def test_unreadable_and_missing_rows_are_reported_not_fatal(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path, "run1")
    with (run_dir / "rows.jsonl").open("a") as fh:
        fh.write('{"run_id": "run1", "job_id": "trunc')  # a half-written last line
    text = write_summary(run_dir).read_text()
    assert "1 unreadable line(s) in rows.jsonl skipped (line 37)" in text
    (run_dir / "rows.jsonl").unlink()
    text = write_summary(run_dir).read_text()
    assert "36 of 36 jobs have no row" in text


def test_missing_or_invalid_manifest_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no manifest"):
        write_summary(tmp_path)
    (tmp_path / "manifest.json").write_text('{"run_id": "x"}')
    with pytest.raises(InputError, match="invalid manifest"):
        write_summary(tmp_path)


def test_resolve_run(tmp_path: Path) -> None:
    a = write_run(tmp_path, "20240101-aaaa")
    write_run(tmp_path, "20240101-bbbb")
    assert resolve_run(str(a), tmp_path / "elsewhere") == a
    assert resolve_run("20240101-aaaa", tmp_path) == a
    assert resolve_run("20240101-a", tmp_path) == a  # unique prefix
    with pytest.raises(InputError, match="ambiguous"):
        resolve_run("20240101", tmp_path)
    with pytest.raises(InputError, match="no run 'nope'.*recent runs: 20240101-"):
        resolve_run("nope", tmp_path)
    (tmp_path / "plain").mkdir()
    with pytest.raises(InputError, match="not a run directory"):
        resolve_run(str(tmp_path / "plain"), tmp_path)


def test_write_comparison(tmp_path: Path) -> None:
    """What ``qfarm compare A B`` writes: the floor checked, compare.md and its delta plot."""
    a = write_run(tmp_path, "A", n_questions=40, strict_every=3)
    b = write_run(
        tmp_path,
        "B",
        n_questions=40,
        strict_every=1,
        policy=build_policy({"quantifier_reminder_enabled": True}),
    )
    out = tmp_path / "cmp"
    path = write_comparison(compare_dirs(a, b, 5.0), out)
    text = path.read_text()
    assert path == out / "compare.md"
    assert (out / "compare_deltas.png").read_bytes()[:8] == PNG_MAGIC
    assert "](compare_deltas.png)" in text
    assert "- `quantifier_reminder_enabled`: false → true" in text
    assert "BETTER: `quote` strict-rate (of answered)" in text
    with pytest.raises(InputError, match="floor"):
        check_floor(-2)


def test_cli_report_and_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(tmp_path, "A", digest="sha256:1111")
    b = write_run(tmp_path, "B", digest="sha256:2222")
    assert main(["report", "A", "--results-dir", str(tmp_path)]) == 0
    assert f"summary: {tmp_path / 'A' / 'summary.md'}" in capsys.readouterr().out
    assert main(["compare", "A", "B", "--results-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "warning: Different question files" in out
    assert f"compare: {b / 'compare.md'}" in out  # default --out is RUN_B's directory
    assert (
        main(["compare", "A", "B", "--results-dir", str(tmp_path), "--out", str(tmp_path / "o")])
        == 0
    )
    assert (tmp_path / "o" / "compare.md").exists()
    assert main(["compare", "A", "B", "--results-dir", str(tmp_path), "--floor", "-1"]) == 2
    assert "--floor -1.0" in capsys.readouterr().err
    assert main(["report", "missing", "--results-dir", str(tmp_path)]) == 2


def test_report_uses_results_dir_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run(tmp_path, "R1")
    monkeypatch.setenv("QFARM_RESULTS_DIR", str(tmp_path))
    assert main(["report", "R1"]) == 0
    assert (tmp_path / "R1" / "summary.md").exists()


@pytest.mark.slow  # ~15 s: tracemalloc slows json parsing of 100k rows about fivefold
def test_100k_row_file_renders_in_bounded_memory(tmp_path: Path) -> None:
    # 1,000 questions × 3 modes × 34 samples = 102,000 rows (~160 MB of JSON).
    n_questions, n = 1_000, 34
    rows_path = tmp_path / "rows.jsonl"
    with rows_path.open("w") as fh:
        for row in rows_for("big", n_questions, n):
            fh.write(json.dumps(row) + "\n")
    manifest = Manifest(
        run_id="big", created_at=1_700_000_000.0, question_file="q.txt", question_file_digest="sha256:0",
        n_questions=n_questions, modes=MODES, n=n, n_jobs=n_questions * 3 * n, policy=Policy(),
        verifier_policy_hash="0123456789abcdef", governance_policy_hash="fedcba9876543210",
        model="adamo1139/Hermes-3-Llama-3.1-8B-FP8-Dynamic", model_profile_id="hermes-3-8b",
    )  # fmt: skip

    # What holding the rows would take: parse a sample of 2,000 and scale up.
    gc.collect()
    tracemalloc.start()
    with rows_path.open() as fh:
        held = [json.loads(next(fh)) for _ in range(2_000)]
    per_row = tracemalloc.get_traced_memory()[0] / len(held)
    tracemalloc.stop()
    del held
    holding_all = per_row * n_questions * 3 * n

    gc.collect()
    tracemalloc.start()
    stats = read_stats(rows_path)
    text = render_stats(manifest, stats)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()

    assert stats.rows == n_questions * 3 * n
    assert f"| rows | 102000 of 102000 expected; {stats.error_rows} of 102000 rows are errors" in text
    assert "Latency percentiles come from a bounded sketch" in text
    print(f"\npeak {peak / 1e6:.1f} MB streaming vs ~{holding_all / 1e6:.0f} MB to hold the rows")
    assert peak < holding_all / 20


def test_cli_compare_decides_an_abd_cycle_from_four_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    roles = {
        "O": {},
        "A": {"quantifier_guard_apply_caps": True},
        "B": {"quantifier_reminder_enabled": True},
        "D": {"quantifier_guard_apply_caps": True, "quantifier_reminder_enabled": True},
    }
    for run_id, policy in roles.items():
        write_run(tmp_path, run_id, n_questions=20, policy=build_policy(policy))
    args = ["compare", "D", "O", "B", "A", "--results-dir", str(tmp_path)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "A/B/D cycle: neither (no step cleared its rule)." in out  # same rows in every run
    assert "caps alone (`O` → `A`): `quantifier_guard_apply_caps`" in out
    assert f"cycle: {tmp_path / 'A' / 'cycle.md'}" in out  # the last run given
    assert "## Decision" in (tmp_path / "A" / "cycle.md").read_text()
    assert main(["compare", "O", "A", "B", "--results-dir", str(tmp_path)]) == 2
    assert "got 3 runs" in capsys.readouterr().err
    write_run(tmp_path, "A2", n_questions=20, policy=build_policy(roles["A"]))
    assert main(["compare", "O", "A", "B", "A2", "--results-dir", str(tmp_path)]) == 2
    assert "both 'caps only'" in capsys.readouterr().err


def test_the_api_comparison_carries_the_phase_decision(tmp_path: Path) -> None:
    from qfarm.common.settings import Settings
    from qfarm.producer.http.runs import compare_json

    write_run(tmp_path, "A", n_questions=20)
    write_run(tmp_path, "B", n_questions=20, policy=build_policy({"quantifier_guard_apply_caps": True}))
    out = compare_json(Settings(results_dir=tmp_path), "A", "B", 5.0)  # type: ignore[call-arg]
    phase = out["phase"]
    assert (phase["switch"], phase["on_in"], phase["decision"]) == (
        "quantifier_guard_apply_caps", "B", "no signal"
    )
    assert {s["key"] for s in phase["signals"]} == {
        "claims", "strict", "hybrid", "ungrounded", "answered_strict"
    }
    assert phase["decided_by"] == []
    json.dumps(out)  # the whole answer is JSON
    assert compare_json(Settings(results_dir=tmp_path), "A", "A", 5.0)["phase"] is None  # type: ignore[call-arg]


def test_an_error_bar_never_reaches_back_past_its_delta() -> None:
    from qfarm.producer.reports.compare import error_bar

    assert error_bar(10.0, -5.0, 30.0) == (15.0, 20.0)
    # mean claims per answer, in percent of A's mean: +120 with [-125, +365] is drawn
    # from -100 up to the point (the bar's upper half would be negative: matplotlib refuses).
    assert error_bar(120.0, -125.0, 365.0) == (220.0, 0.0)


def test_report_counts_jobs_not_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One row deleted and another written twice: as many lines as jobs, one job short."""
    run = write_run(tmp_path, "A", digest="sha256:1111")
    rows = (run / "rows.jsonl").read_text().splitlines(keepends=True)
    assert len(rows) == 36
    (run / "rows.jsonl").write_text("".join([*rows[1:], rows[-1]]))
    code = main(["report", "A", "--results-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "35 of 36 jobs have a row" in err and "holds 1 rows for jobs that already have one" in err
    summary = (run / "summary.md").read_text()
    assert f"| rows | {len(rows) - 1} of {len(rows)} expected (1 more lines repeat a job) |" in summary
    assert summary.split("| status |")[1].split("|")[0].strip() != "complete"


def test_the_pause_between_an_interrupt_and_its_resume_is_left_out_of_the_wall_time(
    tmp_path: Path,
) -> None:
    from qfarm.producer.runs.follow import record_resume

    run_dir = write_run(tmp_path, "run-p")  # 36 rows; created at 1_700_000_000
    status = {"status": "interrupted", "finished_at": 1_700_000_010.0}
    (run_dir / "status.json").write_text(json.dumps(status))
    assert record_resume(run_dir, now=1_700_003_610.0) == 3600.0  # resumed an hour later
    status = json.loads((run_dir / "status.json").read_text())
    assert status["paused_s"] == 3600.0
    status.update(status="complete", finished_at=1_700_003_630.0)  # and done 20 s after
    (run_dir / "status.json").write_text(json.dumps(status))
    text = write_summary(run_dir, record_cost=True).read_text()
    assert "| wall time | 30.0 s (3600.0 s between an interrupt and its resume left out) |" in text
    assert "| throughput | 1.20 jobs/s |" in text
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["cost"]["wall_s"] == 30.0
    # A second interrupt and resume add their pause to the first one's.
    assert record_resume(run_dir, now=1_700_003_730.0) == 100.0
    assert json.loads((run_dir / "status.json").read_text())["paused_s"] == 3700.0


def test_the_latency_plot_reads_its_axis_in_ms_and_s_not_powers_of_ten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from matplotlib.figure import Figure

    from qfarm.producer.reports.rows import read_run
    from qfarm.producer.reports.summary import plot_latency

    drawn: list[Figure] = []
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: drawn.append(fig))
    manifest, stats = read_run(write_run(tmp_path, "run1"))
    plot_latency(manifest, stats, tmp_path / LATENCY_PLOT)
    (fig,) = drawn
    fig.canvas.draw()
    ax = fig.axes[0]
    lo, hi = ax.get_xlim()
    labels = [t.get_text() for t in ax.get_xticklabels() if lo <= t.get_position()[0] <= hi]
    assert labels and all(re.fullmatch(r"\d+(\.\d+)? (ms|s)", x) for x in labels), labels


def test_a_run_warms_the_plotting_library_once_on_a_thread_of_its_own() -> None:
    """``warm_plotting`` imports matplotlib on one daemon thread however often a run calls
    it, and leaves the caller free: measured in a fresh interpreter, where nothing has
    imported matplotlib yet."""
    import subprocess
    import sys

    code = (
        "import sys, threading\n"
        "from qfarm.producer.reports import summary\n"
        "assert 'matplotlib.figure' not in sys.modules\n"
        "summary.warm_plotting(); summary.warm_plotting()\n"
        "warming = [t for t in threading.enumerate() if t.name == 'qfarm-warm-plots']\n"
        "assert len(warming) <= 1 and (not warming or warming[0].daemon), warming\n"
        "summary._warming.join(60)\n"
        "summary.warm_plotting()\n"
        "assert not [t for t in threading.enumerate() if t.name == 'qfarm-warm-plots']\n"
        "print(sorted(m for m in ('matplotlib.figure', 'matplotlib.backends.backend_agg',"
        " 'matplotlib.ticker') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[3], timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str(
        ["matplotlib.backends.backend_agg", "matplotlib.figure", "matplotlib.ticker"])
