"""Writing a run's record into its manifest when it ends, and checking a run against it
(``qfarm verify``). The record's format: docs/reports.md, 'The run record'."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qfarm.common.errors import ConfigError, InputError
from qfarm.common.models import Manifest
from qfarm.common.policy import governance_policy_hash, verifier_policy_hash
from qfarm.common.record import (
    Check,
    RunRecord,
    check_digest,
    check_rows_content,
    check_rows_digest,
    check_versions,
    digest_rows,
    rule_versions,
    sha256,
)
from qfarm.common.reporting.runstats import RunStats
from qfarm.common.settings import Settings
from qfarm.producer.reports.rows import ROWS, iter_rows
from qfarm.producer.reports.summary import SUMMARY, existing_plots, summary_text
from qfarm.producer.rundir import read_manifest, read_status, write_json_atomic

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )


def qfarm_version() -> str:
    try:
        return metadata.version("qfarm")
    except metadata.PackageNotFoundError:
        return "unknown"


def git_commit() -> str | None:
    """The commit of the checkout qfarm runs from, None when it is not one (an install)."""
    here = Path(__file__).resolve().parent.parent
    if not (here / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _file_sha256(path: Path) -> str | None:
    try:
        return sha256(path.read_bytes())
    except OSError:
        return None


def _rows_lines(path: Path) -> Iterator[bytes]:
    """rows.jsonl's lines as ``bytes.splitlines(keepends=True)`` cuts them, read a line at a
    time: the whole file and a list of its lines held at once were twice its size (over
    half a gigabyte at 100k rows, at the end of every run)."""
    try:
        fh = path.open("rb")
    except FileNotFoundError:
        return
    with fh:
        for line in fh:
            if b"\r" in line:  # splitlines also ends a line at a lone carriage return
                yield from line.splitlines(keepends=True)
            else:
                yield line


# What the record copies from the manifest: the fields the two models name alike (the
# question file, policy hashes, retriever, index, corpus, model, endpoints, server).
FROM_MANIFEST = frozenset(RunRecord.model_fields) & frozenset(Manifest.model_fields)


def write_record(run_dir: Path, *, signing_key: Path | None = None) -> RunRecord:
    """Digest what decided the run's rows and the files it wrote, into manifest.json, and
    sign it with ``signing_key`` (default QFARM_SIGNING_KEY) when there is one."""
    manifest = read_manifest(run_dir)
    source = Path(manifest.question_file)
    rows = digest_rows(_rows_lines(run_dir / ROWS))
    record = RunRecord(
        **{name: getattr(manifest, name) for name in FROM_MANIFEST},
        recorded_at=time.time(),
        question_file_sha256=_file_sha256(source) if source.is_file() else None,
        qfarm_version=qfarm_version(),
        git_commit=git_commit(),
        rule_versions=rule_versions(),
        rows_sha256=rows.sha256,
        rows_lines=rows.lines,
        rows_block_sha256=rows.blocks,
        summary_sha256=_file_sha256(run_dir / SUMMARY),
    )
    updated = manifest.model_copy(update={"record": record})
    write_json_atomic(run_dir / "manifest.json", updated.model_dump(mode="json"))
    key = signing_key if signing_key is not None else Settings().signing_key
    if key is not None:
        sign_record(run_dir, key)
    else:
        # A signature of an earlier record (before --retry-errors rewrote it) would fail.
        (run_dir / SIGNATURE).unlink(missing_ok=True)
    return record


SIGNATURE = "record.sig"


def _load_private_key(path: Path) -> Ed25519PrivateKey:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(f"QFARM_SIGNING_KEY {path}: not an unencrypted PEM private key ({exc}); "
                          "make one with `openssl genpkey -algorithm ed25519 -out KEY.pem`") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"QFARM_SIGNING_KEY {path}: a {type(key).__name__}, not an Ed25519 key; "
                          "make one with `openssl genpkey -algorithm ed25519 -out KEY.pem`")
    return key


def _key_id(public: Ed25519PublicKey) -> str:
    from cryptography.hazmat.primitives import serialization

    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return sha256(raw)[:16]


def sign_record(run_dir: Path, key_path: Path) -> None:
    """Sign manifest.json, record included, as it is now, into ``record.sig``: who holds the
    private key wrote this record, and the record pins every file it digests."""
    key = _load_private_key(key_path)
    data = (run_dir / "manifest.json").read_bytes()
    write_json_atomic(run_dir / SIGNATURE, {
        "algorithm": "ed25519",
        "key_id": _key_id(key.public_key()),
        "manifest_sha256": sha256(data),
        "signature": base64.b64encode(key.sign(data)).decode(),
    })  # fmt: skip


def check_signature(run_dir: Path, public_key: Path | None) -> Check:
    """Whether ``record.sig`` signs manifest.json as it is, by ``public_key``'s holder; a
    note, not a verdict, when no key is given."""
    path = run_dir / SIGNATURE
    signed: dict[str, Any] | None = None
    if path.is_file():
        try:
            signed = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            signed = {}
    if public_key is None:
        if signed is None:
            return Check("signature", None, "unsigned: the checks above show the files agree with "
                         "manifest.json's record, not who wrote it (QFARM_SIGNING_KEY signs runs)")
        return Check("signature", None, f"signed by key {signed.get('key_id', '?')}; give "
                     "--public-key to check it (without it, anyone could have rewritten both)")
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        public = serialization.load_pem_public_key(Path(public_key).read_bytes())
    except (OSError, ValueError) as exc:
        raise InputError(f"--public-key {public_key}: not a PEM public key ({exc})") from None
    if not isinstance(public, Ed25519PublicKey):
        raise InputError(f"--public-key {public_key}: not an Ed25519 public key")
    if signed is None:
        return Check("signature", False, f"no {SIGNATURE}: the run was not signed")
    try:
        public.verify(base64.b64decode(str(signed.get("signature", ""))),
                      (run_dir / "manifest.json").read_bytes())
    except (InvalidSignature, ValueError):
        return Check("signature", False, f"{SIGNATURE} does not sign manifest.json with key "
                     f"{_key_id(public)}: the manifest or its record was changed after signing, "
                     "or another key signed it")
    return Check("signature", True, f"manifest.json and its record signed by key {_key_id(public)}")


def verify_run(run_dir: Path, *, questions: Path | None = None,
               public_key: Path | None = None) -> list[Check]:
    """Every check ``qfarm verify`` prints, in order; the run verifies when none is False.

    ``questions``: where the question file is now, if not where the manifest says."""
    manifest = read_manifest(run_dir)
    record = manifest.record
    if record is None:
        raise InputError(f"{run_dir}: the manifest has no run record (a run still going, or made "
                         "before qfarm wrote records); nothing to verify against")
    checks: list[Check] = []
    checks += check_rows_digest(record, digest_rows(_rows_lines(run_dir / ROWS)))
    checks.append(check_digest("summary.md", record.summary_sha256,
                               _file_sha256(run_dir / SUMMARY), missing="summary.md is missing"))
    stats = RunStats()

    def rows_once() -> Iterator[dict[str, Any] | None]:
        """Each row parsed once, for the row checks and the summary's figures both."""
        for line in iter_rows(run_dir / ROWS):
            if line.row is None:
                stats.note_unreadable(line.lineno)
            else:
                stats.add(line.row)
            yield line.row

    checks += check_rows_content(rows_once(), run_id=manifest.run_id, n_jobs=manifest.n_jobs,
                                 verifier_hash=record.verifier_policy_hash,
                                 governance_hash=record.governance_policy_hash,
                                 model=record.model)
    checks.append(_summary_from_rows(run_dir, stats))
    checks += _policy(manifest.policy, record)
    checks.append(_question_file(record, questions))
    for what, got, want in (("model", manifest.model, record.model),
                            ("index", manifest.index_version, record.index_version),
                            ("endpoints", manifest.endpoints, record.endpoints)):
        checks.append(Check(what, got == want, f"{want}" if got == want else
                            f"the manifest says {got}, the record {want}"))
    checks += check_versions(record, qfarm_version=qfarm_version(), git_commit=git_commit())
    checks.append(check_signature(run_dir, public_key))
    return checks


def _summary_from_rows(run_dir: Path, stats: RunStats) -> Check:
    """summary.md rendered again from rows.jsonl's figures (``stats``), the manifest and the
    status must be it."""
    manifest = read_manifest(run_dir)
    status = read_status(run_dir)
    text = summary_text(manifest, stats, status, existing_plots(run_dir), status.finished_at)
    try:
        have = (run_dir / SUMMARY).read_text(encoding="utf-8")
    except OSError:
        return Check("summary from rows", False, "summary.md is missing")
    if have == text:
        return Check("summary from rows", True, "summary.md is what rows.jsonl renders")
    a, b = have.splitlines(), text.splitlines()
    at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    shown = b[at] if at < len(b) else "(end of file)"
    return Check("summary from rows", False,
                 f"summary.md was not rendered from these rows: line {at + 1} reads "
                 f"{(a[at] if at < len(a) else '(end of file)')[:80]!r}, the rows give "
                 f"{shown[:80]!r}")


def _policy(policy, record: RunRecord) -> list[Check]:
    out = []
    for what, fn, want in (("verifier_policy_hash", verifier_policy_hash,
                            record.verifier_policy_hash),
                           ("governance_policy_hash", governance_policy_hash,
                            record.governance_policy_hash)):
        got = fn(policy)
        out.append(Check(what, got == want, f"{want} recomputed from the manifest's policy"
                         if got == want else f"the manifest's policy hashes to {got} here, the "
                         f"record says {want} (policy edited, or this qfarm's rule versions "
                         "differ: see below)"))
    return out


def _question_file(record: RunRecord, questions: Path | None) -> Check:
    if record.question_file_sha256 is None:
        return Check("question file", None, f"{record.question_file}: the questions did not "
                     "come from a file; not checked")
    path = questions or Path(record.question_file)
    return check_digest("question file", record.question_file_sha256, _file_sha256(path),
                        missing=f"{path}: not found here; pass --questions FILE to check it")
