"""The command line end to end on embedded defaults (eager, simulator, embedded index)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
QFARM = str(Path(sys.executable).parent / "qfarm")
ROW_FIELDS = set(
    "run_id job_id question question_id mode sample_index verdict label ratio n_claims "
    "n_verified violation_kinds format_collapsed answer_brackets answer_pointer_count "
    "answer_chars_with_brackets raw_meaningful_line_count quantifier_intensity "
    "quantifier_matched_token quantifier_explicit_count scope_bound_hint claim_cap_applied "
    "model_profile_id endpoint evidence_ids top_doc_titles answerability verifier_policy_hash "
    "governance_policy_hash cache_hit attempts error timings usage worker started_at "
    "finished_at".split()
)


def qfarm(env, *args, timeout=300):
    return subprocess.run([QFARM, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_smoke_sweep_over_three_modes(env, tmp_path):
    res = qfarm(env, "sweep", "bench/questions/smoke.txt", "--modes",
                "quote,claim_lattice_pointer,claim_lattice", "-n", "2", "--eager", "--quiet")
    assert res.returncode == 0, res.stderr
    assert "using the vLLM simulator at http://127.0.0.1:" in res.stderr
    paths = dict(line.split(":", 1) for line in res.stdout.strip().splitlines())
    rows_path = Path(paths["rows"].split("(")[0].strip())
    summary_path = Path(paths["summary"].strip())
    rows = [json.loads(line) for line in rows_path.read_text().splitlines()]
    n_questions = sum(1 for ln in (REPO / "bench/questions/smoke.txt").read_text().splitlines()
                      if ln.strip() and not ln.startswith("#"))
    assert len(rows) == len({r["job_id"] for r in rows}) == n_questions * 3 * 2
    assert all(ROW_FIELDS <= set(r) for r in rows)
    assert {r["verdict"] for r in rows} == {"STRICT", "HYBRID", "UNGROUNDED"}
    summary = summary_path.read_text()
    assert "SIMULATED" in summary and "## Verdicts by mode" in summary
    for mode in ("quote", "claim_lattice_pointer", "claim_lattice"):
        assert f"| `{mode}` |" in summary
    manifest = json.loads((rows_path.parent / "manifest.json").read_text())
    assert manifest["simulated"] is True and manifest["n_jobs"] == len(rows)
    assert manifest["question_file_digest"].startswith("sha256:")
    assert manifest["index_version"] and manifest["verifier_policy_hash"]


def test_share_samples_flag_turns_the_policy_switch_on(env, tmp_path):
    res = qfarm(env, "sweep", "bench/questions/smoke.txt", "--modes", "quote", "-n", "2",
                "--limit", "2", "--eager", "--quiet", "--share-samples")
    assert res.returncode == 0, res.stderr
    paths = dict(line.split(":", 1) for line in res.stdout.strip().splitlines())
    rows_path = Path(paths["rows"].split("(")[0].strip())
    manifest = json.loads((rows_path.parent / "manifest.json").read_text())
    assert manifest["policy"]["share_samples"] is True
    rows = [json.loads(line) for line in rows_path.read_text().splitlines()]
    assert len(rows) == len({r["job_id"] for r in rows}) == 4
    assert {r["llm_request"]["prompts"] for r in rows} == {2}  # two samples, one request


def test_retrieval_figures_of_a_sweep_whose_questions_carry_answers_and_titles(env, tmp_path):
    lines = [ln for ln in (REPO / "bench/questions/general.jsonl").read_text().splitlines()
             if ln.startswith("{") and '"answers"' in ln and '"title"' in ln][:4]
    qfile = tmp_path / "q.jsonl"
    qfile.write_text("\n".join(lines) + "\n")
    res = qfarm(env, "sweep", str(qfile), "--modes", "quote", "-n", "1", "--eager", "--quiet")
    assert res.returncode == 0, res.stderr
    paths = dict(line.split(":", 1) for line in res.stdout.strip().splitlines())
    rows = [json.loads(ln) for ln in Path(paths["rows"].split("(")[0].strip()).read_text().splitlines()]
    assert len(rows) == 4
    for row in rows:
        # The rank is set exactly when gold is in the evidence, and is a position in it.
        assert (row["gold_evidence_rank"] is not None) == row["gold_in_evidence"]
        assert row["gold_evidence_rank"] is None or 1 <= row["gold_evidence_rank"] <= 8
        assert isinstance(row["article_in_evidence"], bool)
        assert (row["article_rank"] is not None) == row["article_in_evidence"]
    assert any(row["article_in_evidence"] for row in rows)
    summary = Path(paths["summary"].strip()).read_text()
    assert "| mode | rows with gold | answer accuracy | retrieval recall | MRR | article hit |" in summary


@pytest.mark.parametrize("mode", ["quote", "claim_lattice_pointer", "claim_lattice"])
def test_ask_prints_the_audit_line(env, mode):
    res = qfarm(env, "ask", "Who were all the members of the Beatles?", "--mode", mode, "--eager")
    assert res.returncode in (0, 1), res.stderr
    lines = res.stdout.splitlines()
    if mode != "quote":  # a broad question in a guarded mode: the preflight line comes first
        assert lines.pop(0).startswith("BROAD-QUANTIFIER PREFLIGHT · ALL")
    first = lines[0]
    assert f" · via {mode}" in first
    assert first.split(" · ")[0] in {"EVIDENCE-WARRANTED", "ANCHOR-WARRANTED", "POINTER-LINKED",
                                     "UNGROUNDED", "EXPLORATORY", "BROAD-REJECTED", "BROAD-CAPPED"}


def test_ask_json_carries_the_row_and_the_sidecar(env):
    res = qfarm(env, "ask", "What is jazz?", "--mode", "quote", "--eager", "--json")
    assert res.returncode in (0, 1), res.stderr
    data = json.loads(res.stdout)
    assert ROW_FIELDS <= set(data) and "answerability_detail" in data


def test_reject_broad_flag_on_ask(env):
    res = qfarm(env, "ask", "Tell me everything you know about volcanoes.", "--eager",
                "--reject-broad", "--json")
    data = json.loads(res.stdout)
    assert data["label"] == "BROAD-REJECTED" and data["evidence_ids"] == []


@pytest.mark.parametrize(
    ("files", "args", "message"),
    [
        ({}, ["sweep", "nope.txt", "--eager"], "nope.txt: no such question file"),
        ({"e.txt": "# only a comment\n\n"}, ["sweep", "{d}/e.txt", "--eager"], "no questions found"),
        ({"b.jsonl": '{"question": "What is jazz?"}\n{"question": 3}\n'},
         ["sweep", "{d}/b.jsonl", "--eager"], 'b.jsonl:2: missing "question"'),
        ({"m.jsonl": '{"question": "What is jazz?"}\nnot json\n'},
         ["sweep", "{d}/m.jsonl", "--eager"], "m.jsonl:2: malformed JSON"),
        ({"q.txt": "What is jazz?\n"}, ["sweep", "{d}/q.txt", "--eager", "--modes", "poem"],
         "unknown mode 'poem'"),
        ({"q.txt": "What is jazz?\n"}, ["sweep", "{d}/q.txt", "--eager", "--policy", "topk=3"],
         "unknown policy key"),
        ({"q.txt": "What is jazz?\n"},
         ["sweep", "{d}/q.txt", "--eager", "--policy", "temperature=hot"], "temperature"),
        ({"q.txt": "What is jazz?\n"}, ["sweep", "{d}/q.txt", "--eager", "-n", "0"], "-n 0"),
        ({}, ["ask", "   ", "--eager"], "the question is empty"),
    ],
)
def test_bad_input_is_one_clear_line_and_leaves_nothing(env, tmp_path, files, args, message):
    d = tmp_path / "in"
    d.mkdir()
    for name, text in files.items():
        (d / name).write_text(text)
    res = qfarm(env, *[a.format(d=d) for a in args])
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith("qfarm: error: ") and message in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "results").exists()


def test_unreachable_endpoint_is_a_clear_error(env, tmp_path):
    (tmp_path / "q.txt").write_text("What is jazz?\n")
    env = dict(env, QFARM_LLM_ENDPOINTS="http://127.0.0.1:9")
    res = qfarm(env, "sweep", str(tmp_path / "q.txt"), "--eager")
    assert res.returncode == 2
    assert "no LLM endpoint is reachable: http://127.0.0.1:9 unreachable" in res.stderr
    assert "QFARM_LLM_ENDPOINTS" in res.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("flags", [[], ["--serial"]], ids=["concurrent", "serial"])
def test_an_eager_sweep_runs_without_celery(env, flags):
    # The in-process runner walks the stage chain itself: only `ask --eager` (Celery's eager
    # mode) and the runs that send messages load Celery (qfarm.worker.celery).
    code = ("import sys; from qfarm.cli import main; "
            "rc = main(['sweep', 'bench/questions/smoke.txt', '--modes', 'quote', '-n', '1', "
            f"'--eager', '--quiet', *{flags!r}]); print('celery' in sys.modules); sys.exit(rc)")
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "False"
