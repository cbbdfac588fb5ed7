"""The run record: a digest of everything that decided a run's rows, and checking it.

Written into ``manifest.json`` (``Manifest.record``) when a run ends, and again after a
``--retry-errors``; ``qfarm verify`` recomputes what it can from the run's files and
compares (docs/reports.md, 'The run record'). Pure: the caller reads the files and hands
over their bytes' digests.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from qfarm.common import versions

RECORD_VERSION = 1
# rows.jsonl is digested in blocks of this many lines as well, so a check can say where
# a file differs, not only that it does.
ROWS_BLOCK = 100


class RunRecord(BaseModel):
    """What decided a run's rows, and the digests of the files it wrote."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    record_version: int = RECORD_VERSION
    recorded_at: float
    question_file: str
    question_file_sha256: str | None  # None: the questions did not come from a file
    verifier_policy_hash: str
    governance_policy_hash: str
    retriever: str
    index_version: str | None
    corpus: str | None
    model: str
    endpoints: tuple[str, ...]
    llm_server: str | None
    simulated: bool
    qfarm_version: str
    git_commit: str | None  # when qfarm ran from a git checkout
    rule_versions: dict[str, str | int]
    rows_sha256: str
    rows_lines: int
    rows_block_sha256: list[str] = Field(default_factory=list)  # per ROWS_BLOCK lines, 16 hex
    summary_sha256: str | None


def rule_versions() -> dict[str, str | int]:
    """The versions of the prompt, verifier, classifier and the other rule sets in this qfarm."""
    return {
        "prompt": versions.PROMPT_VERSION,
        "verifier": versions.VERIFIER_VERSION,
        "classifier": versions.CLASSIFIER_VERSION,
        "denial_patterns": versions.DENIAL_PATTERNS_VERSION,
        "extraction_cues": versions.EXTRACTION_CUES_VERSION,
        "model_profiles": versions.MODEL_PROFILES_VERSION,
        "chunker": versions.CHUNKER_VERSION,
        "row_schema": versions.ROW_SCHEMA_VERSION,
    }


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class RowsDigest(NamedTuple):
    sha256: str
    lines: int
    blocks: list[str]


def digest_rows(lines: Iterable[bytes]) -> RowsDigest:
    """sha256 of the rows file (its lines in order, as bytes) and of each block of lines."""
    whole, block = hashlib.sha256(), hashlib.sha256()
    n, blocks = 0, []
    for line in lines:
        whole.update(line)
        block.update(line)
        n += 1
        if n % ROWS_BLOCK == 0:
            blocks.append(block.hexdigest()[:16])
            block = hashlib.sha256()
    if n % ROWS_BLOCK:
        blocks.append(block.hexdigest()[:16])
    return RowsDigest(whole.hexdigest(), n, blocks)


class Check(NamedTuple):
    """One line of ``qfarm verify``: ``ok`` None is information, not a verdict."""

    what: str
    ok: bool | None
    detail: str


def check_rows_digest(record: RunRecord, found: RowsDigest) -> list[Check]:
    if found.sha256 == record.rows_sha256:
        return [Check("rows.jsonl", True, f"sha256 {found.sha256[:16]}… matches "
                      f"({found.lines} lines)")]
    differ = [i for i, (a, b) in enumerate(zip(record.rows_block_sha256, found.blocks, strict=False))
              if a != b]
    if len(found.blocks) != len(record.rows_block_sha256):
        differ.append(min(len(found.blocks), len(record.rows_block_sha256)))
    where = ", ".join(f"lines {i * ROWS_BLOCK + 1}-{(i + 1) * ROWS_BLOCK}"
                      for i in sorted(set(differ))[:5]) or "somewhere"
    return [Check("rows.jsonl", False,
                  f"changed since the run wrote it: sha256 {found.sha256[:16]}… != recorded "
                  f"{record.rows_sha256[:16]}…, {found.lines} lines (recorded "
                  f"{record.rows_lines}); differs in {where}")]


def check_rows_content(rows: Iterable[Mapping[str, Any] | None], *, run_id: str, n_jobs: int,
                       verifier_hash: str, governance_hash: str, model: str) -> list[Check]:
    """Each row against the manifest: readable, of this run, one per job, same hashes and model."""
    seen: set[str] = set()
    problems: list[str] = []
    count = 0
    for lineno, row in enumerate(rows, start=1):
        count += 1
        if row is None:
            problems.append(f"line {lineno}: not a JSON object")
            continue
        job_id = str(row.get("job_id"))
        if job_id in seen:
            problems.append(f"line {lineno}: job {job_id} has a second row")
        seen.add(job_id)
        for key, want in (("run_id", run_id), ("verifier_policy_hash", verifier_hash),
                          ("governance_policy_hash", governance_hash), ("model", model)):
            got = row.get(key)
            if got is not None and got != want:
                problems.append(f"line {lineno}: {key} {got!r}, the manifest says {want!r}")
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        return [Check("rows", False, "; ".join(problems[:5]) + more)]
    return [Check("rows", True, f"{count} rows, one per job id ({len(seen)} of {n_jobs} "
                  "jobs), all of this run, its policy hashes and model")]


def check_digest(what: str, recorded: str | None, found: str | None, *, missing: str) -> Check:
    if recorded is None:
        return Check(what, None, "not recorded")
    if found is None:
        return Check(what, False, missing)
    if found == recorded:
        return Check(what, True, f"sha256 {found[:16]}… matches")
    return Check(what, False, f"changed since the run: sha256 {found[:16]}… != recorded "
                 f"{recorded[:16]}…")


def check_versions(record: RunRecord, *, qfarm_version: str, git_commit: str | None) -> list[Check]:
    """What the run was made with against this qfarm: information only (the files stand)."""
    out = []
    now = rule_versions()
    changed = [f"{k} {record.rule_versions.get(k)} → {v}" for k, v in now.items()
               if record.rule_versions.get(k) != v]
    out.append(Check("rule versions", None,
                     "the same in this qfarm" if not changed else
                     "this qfarm differs (re-running would not give the same rows): "
                     + ", ".join(changed)))
    made = record.qfarm_version + (f" (commit {record.git_commit[:12]})" if record.git_commit else "")
    here = qfarm_version + (f" (commit {git_commit[:12]})" if git_commit else "")
    out.append(Check("qfarm", None, f"made with qfarm {made}; this is qfarm {here}"))
    return out


def record_differences(a: RunRecord | None, b: RunRecord | None) -> list[str]:
    """How two runs' records differ in what made their rows, beyond what the manifests show."""
    if a is None or b is None:
        return []
    out = [f"Different {k} version: A `{a.rule_versions.get(k)}` vs B `{b.rule_versions.get(k)}`."
           for k in sorted(set(a.rule_versions) | set(b.rule_versions))
           if a.rule_versions.get(k) != b.rule_versions.get(k)]
    if a.llm_server != b.llm_server:
        out.append(f"Different LLM server: A `{a.llm_server}` vs B `{b.llm_server}`.")
    if (a.qfarm_version, a.git_commit) != (b.qfarm_version, b.git_commit):
        out.append(f"Different qfarm: A {a.qfarm_version} ({a.git_commit or 'no commit'}) vs "
                   f"B {b.qfarm_version} ({b.git_commit or 'no commit'}).")
    return out
