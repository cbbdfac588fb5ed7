"""`qfarm verify`: an untouched run verifies; a hand-edited row, a summary rendered from
other rows or a question file changed since each fail, named on their own line."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
QFARM = str(Path(sys.executable).parent / "qfarm")
QUESTIONS = ["What is jazz?", "Who wrote Hamlet?", "What is the capital of France?"]


def qfarm(env, *args, timeout=300):
    return subprocess.run([QFARM, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def made_run(tmp_path_factory, default_index):
    """One finished eager run (copied per test, which may spoil it)."""
    import os

    work = tmp_path_factory.mktemp("verify")
    questions = work / "q.txt"
    questions.write_text("\n".join(QUESTIONS) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("QFARM_")}
    env.update(QFARM_INDEX_PATH=str(default_index), QFARM_RESULTS_DIR=str(work / "results"))
    res = qfarm(env, "sweep", str(questions), "--modes", "quote,claim_lattice", "--eager",
                "--quiet")
    assert res.returncode == 0, res.stderr
    return env, next((work / "results").iterdir()), questions


@pytest.fixture
def run(made_run, tmp_path):
    env, run_dir, questions = made_run
    target = tmp_path / "results" / run_dir.name
    shutil.copytree(run_dir, target)
    return {**env, "QFARM_RESULTS_DIR": str(tmp_path / "results")}, target, questions


def lines_of(out: str) -> dict[str, str]:
    return {line.split(":", 1)[0].split("  ", 1)[1].strip(): line.split("  ", 1)[0]
            for line in out.splitlines() if line[:4] in ("ok  ", "FAIL", "note")}


def test_an_untouched_run_verifies_line_by_line(run):
    env, run_dir, _ = run
    record = json.loads((run_dir / "manifest.json").read_text())["record"]
    assert record["rows_sha256"] == hashlib.sha256((run_dir / "rows.jsonl").read_bytes()).hexdigest()
    assert record["rule_versions"]["verifier"] and record["qfarm_version"]
    assert record["question_file_sha256"] and record["index_version"]
    res = qfarm(env, "verify", run_dir.name)
    assert res.returncode == 0, res.stdout + res.stderr
    marks = lines_of(res.stdout)
    for what in ("rows.jsonl", "summary.md", "rows", "summary from rows", "question file",
                 "verifier_policy_hash", "governance_policy_hash", "model", "index"):
        assert marks[what] == "ok", res.stdout
    assert "verified, every check matches" in res.stdout


def test_a_row_edited_by_hand_fails(run):
    env, run_dir, _ = run
    rows = (run_dir / "rows.jsonl").read_text().splitlines()
    row = json.loads(rows[1])
    row["verdict"] = "STRICT" if row["verdict"] != "STRICT" else "HYBRID"
    rows[1] = json.dumps(row)
    (run_dir / "rows.jsonl").write_text("\n".join(rows) + "\n")
    res = qfarm(env, "verify", str(run_dir))
    assert res.returncode == 1
    marks = lines_of(res.stdout)
    assert marks["rows.jsonl"] == "FAIL" and marks["summary from rows"] == "FAIL"
    assert "differs in lines 1-100" in res.stdout
    assert marks["question file"] == "ok"


def test_a_summary_rendered_from_other_rows_fails(run):
    env, run_dir, _ = run
    from qfarm.producer.reports.summary import write_summary

    # Render the summary from a run missing a row, put it in place and forge its digest
    # in the record: only rendering again from the rows can tell.
    other = run_dir.parent / "other"
    shutil.copytree(run_dir, other)
    rows = (other / "rows.jsonl").read_text().splitlines()
    (other / "rows.jsonl").write_text("\n".join(rows[:-1]) + "\n")
    text = write_summary(other).read_text()
    (run_dir / "summary.md").write_text(text)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["record"]["summary_sha256"] = hashlib.sha256(text.encode()).hexdigest()
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    res = qfarm(env, "verify", str(run_dir))
    assert res.returncode == 1
    marks = lines_of(res.stdout)
    assert marks["summary.md"] == "ok" and marks["summary from rows"] == "FAIL"
    assert marks["rows.jsonl"] == "ok"


def test_a_question_file_changed_since_fails_and_questions_points_at_the_original(run, tmp_path):
    env, run_dir, questions = run
    original = tmp_path / "original.txt"
    shutil.copy(questions, original)
    try:
        questions.write_text("\n".join(QUESTIONS[:-1]) + "\n")
        res = qfarm(env, "verify", run_dir.name)
        assert res.returncode == 1 and lines_of(res.stdout)["question file"] == "FAIL"
        assert "changed since the run" in res.stdout
        res = qfarm(env, "verify", run_dir.name, "--questions", str(original))
        assert res.returncode == 0, res.stdout
    finally:
        shutil.copy(original, questions)


def _keypair(folder: Path, name: str) -> tuple[Path, Path]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private, public = folder / f"{name}.pem", folder / f"{name}.pub.pem"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


def test_a_signed_record_defeats_a_tamperer_who_rewrites_it(run, tmp_path):
    """Rewriting rows and the record with qfarm's own write_record passes the digest checks,
    as it must; only the operator's signature tells the two apart."""
    from qfarm.producer.reports.record import SIGNATURE, write_record

    env, run_dir, _ = run
    private, public = _keypair(tmp_path, "operator")
    _, other = _keypair(tmp_path, "stranger")
    write_record(run_dir, signing_key=private)
    res = qfarm(env, "verify", str(run_dir), "--public-key", str(public))
    assert res.returncode == 0, res.stdout
    assert lines_of(res.stdout)["signature"] == "ok"
    unchecked = qfarm(env, "verify", str(run_dir))
    assert unchecked.returncode == 0 and lines_of(unchecked.stdout)["signature"] == "note"
    assert "give --public-key" in unchecked.stdout
    wrong = qfarm(env, "verify", str(run_dir), "--public-key", str(other))
    assert wrong.returncode == 1 and lines_of(wrong.stdout)["signature"] == "FAIL"

    # The tamperer edits a row and writes the record anew, keeping the old signature file.
    sig = (run_dir / SIGNATURE).read_bytes()
    rows = (run_dir / "rows.jsonl").read_text().splitlines()
    first = json.loads(rows[0])
    first["verdict"] = "STRICT" if first["verdict"] != "STRICT" else "UNGROUNDED"
    (run_dir / "rows.jsonl").write_text("\n".join([json.dumps(first), *rows[1:]]) + "\n")
    write_record(run_dir, signing_key=None)
    (run_dir / SIGNATURE).write_bytes(sig)
    res = qfarm(env, "verify", str(run_dir), "--public-key", str(public))
    assert res.returncode == 1, res.stdout
    checks = lines_of(res.stdout)
    assert checks["signature"] == "FAIL" and checks["rows.jsonl"] == "ok"  # the digests agree
    assert "changed after signing" in res.stdout


def test_a_sweep_with_a_signing_key_signs_its_record(made_run, tmp_path, default_index):
    env, _, questions = made_run
    private, public = _keypair(tmp_path, "operator")
    env = {**env, "QFARM_SIGNING_KEY": str(private), "QFARM_RESULTS_DIR": str(tmp_path / "r")}
    res = qfarm(env, "sweep", str(questions), "--modes", "quote", "--eager", "--quiet")
    assert res.returncode == 0, res.stderr
    run_dir = next((tmp_path / "r").iterdir())
    assert (run_dir / "record.sig").is_file()
    res = qfarm(env, "verify", str(run_dir), "--public-key", str(public))
    assert res.returncode == 0 and lines_of(res.stdout)["signature"] == "ok", res.stdout
