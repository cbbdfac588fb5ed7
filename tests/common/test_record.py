"""The run record's pure parts: digests of rows.jsonl by block, the checks, and what
``qfarm compare`` warns about when two records differ."""

from __future__ import annotations

import hashlib

from qfarm.common.record import (
    ROWS_BLOCK,
    RunRecord,
    check_digest,
    check_rows_content,
    check_rows_digest,
    digest_rows,
    record_differences,
    rule_versions,
)


def record(**update) -> RunRecord:
    lines = [f'{{"job_id": "j{i}"}}\n'.encode() for i in range(250)]
    rows = digest_rows(lines)
    base = dict(recorded_at=0.0, question_file="q.txt", question_file_sha256="a" * 64,
                verifier_policy_hash="v", governance_policy_hash="g", retriever="embedded",
                index_version="i", corpus="c", model="m", endpoints=("http://e",),
                llm_server=None, simulated=True, qfarm_version="0.1.0", git_commit=None,
                rule_versions=rule_versions(), rows_sha256=rows.sha256, rows_lines=rows.lines,
                rows_block_sha256=rows.blocks, summary_sha256="b" * 64)
    return RunRecord(**{**base, **update})


def test_rows_are_digested_whole_and_by_block_of_lines():
    lines = [f"{i}\n".encode() for i in range(ROWS_BLOCK * 2 + 1)]
    found = digest_rows(lines)
    assert found.sha256 == hashlib.sha256(b"".join(lines)).hexdigest()
    assert found.lines == len(lines) and len(found.blocks) == 3
    assert found.blocks[2] == hashlib.sha256(lines[-1]).hexdigest()[:16]
    assert digest_rows([]).blocks == []


def test_an_edited_line_is_named_by_its_block():
    rec = record()
    lines = [f'{{"job_id": "j{i}"}}\n'.encode() for i in range(250)]
    assert check_rows_digest(rec, digest_rows(lines))[0].ok is True
    lines[150] = b'{"job_id": "j150", "verdict": "STRICT"}\n'
    check = check_rows_digest(rec, digest_rows(lines))[0]
    assert check.ok is False and "lines 101-200" in check.detail and "lines 1-100" not in check.detail
    check = check_rows_digest(rec, digest_rows(lines[:-1]))[0]
    assert check.ok is False and "249 lines (recorded 250)" in check.detail


def test_rows_must_be_one_per_job_of_this_run_with_its_hashes():
    good = {"job_id": "a", "run_id": "r", "verifier_policy_hash": "v",
            "governance_policy_hash": "g", "model": "m"}
    kw = dict(run_id="r", n_jobs=2, verifier_hash="v", governance_hash="g", model="m")
    assert check_rows_content([good, {**good, "job_id": "b"}], **kw)[0].ok is True
    bad = check_rows_content([good, good, None, {**good, "job_id": "c", "run_id": "x"}], **kw)[0]
    assert bad.ok is False
    assert "line 2: job a has a second row" in bad.detail
    assert "line 3: not a JSON object" in bad.detail and "line 4: run_id 'x'" in bad.detail


def test_a_digest_check_says_missing_changed_or_not_recorded():
    assert check_digest("f", "x" * 64, "x" * 64, missing="gone").ok is True
    assert check_digest("f", "x" * 64, "y" * 64, missing="gone").ok is False
    assert check_digest("f", "x" * 64, None, missing="gone").detail == "gone"
    assert check_digest("f", None, "y", missing="gone").ok is None


def test_records_that_differ_in_rule_versions_server_or_qfarm_are_named():
    a = record()
    assert record_differences(a, record()) == [] and record_differences(a, None) == []
    b = record(rule_versions={**rule_versions(), "verifier": "verifier-v0"},
               llm_server="llama.cpp", git_commit="abc")
    diffs = record_differences(a, b)
    assert any("verifier version" in d and "verifier-v0" in d for d in diffs)
    assert any("LLM server" in d for d in diffs) and any("Different qfarm" in d for d in diffs)
