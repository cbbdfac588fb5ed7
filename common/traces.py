"""What every process agrees on about a job's trace, without OpenTelemetry itself.

The workers' live spans (``qfarm.worker.tracing``) and the export from rows
(``qfarm.producer.reports.exports.traces``) share these, so both tell the same story about a job:
which jobs are traced (a hash of the job id against the run's ratio: every process
decides alike, with no coordination), the span names and attribute names, and, for a
run traced live, the trace and span ids (hashed from the run and job ids, so a redelivered
or re-sent job, a worker writing its row, and the producer ending the run all name the
same trace without asking anyone). ``traceparent`` writes the W3C ``traceparent`` header
value the workers read back with OpenTelemetry's TraceContext propagator
(docs/reports.md, 'Exports').
"""

from __future__ import annotations

import hashlib
from typing import Any

from qfarm.common import keys
from qfarm.common.models import Manifest

# About this many traced jobs per run unless a ratio is asked for: a million-job run must
# not send a million traces.
DEFAULT_MAX_TRACES = 1000


def default_ratio(n_jobs: int) -> float:
    """Trace every job of a run up to ``DEFAULT_MAX_TRACES`` jobs, about that many beyond."""
    return 1.0 if n_jobs <= DEFAULT_MAX_TRACES else DEFAULT_MAX_TRACES / n_jobs


def is_sampled(job_id: str, ratio: float) -> bool:
    """The same answer for a job in every process and on every export: its id's hash
    against the ratio."""
    if ratio >= 1:
        return True
    fraction = int.from_bytes(hashlib.sha256(job_id.encode()).digest()[:8], "big") / 2**64
    return fraction < ratio


def _ids(*parts: str) -> tuple[int, int]:
    digest = hashlib.sha256("\x1f".join(("qfarm-trace", *parts)).encode()).digest()
    # A zero id is invalid in W3C trace context; a sha256 half being zero is not going to
    # happen, but the fallback keeps the function total.
    return (int.from_bytes(digest[:16], "big") or 1, int.from_bytes(digest[16:24], "big") or 1)


def run_span_ids(run_id: str) -> tuple[int, int]:
    """(trace id, span id) of a live-traced run's ``qfarm.run`` span."""
    return _ids("run", run_id)


def job_span_ids(run_id: str, job_id: str, attempt: int = 0) -> tuple[int, int]:
    """(trace id, span id) of a job's ``qfarm.job`` span; a ``--retry-errors`` attempt is a
    trace of its own (its first attempt's trace already ended with the error row)."""
    return _ids("job", run_id, job_id, str(attempt))


def traceparent(trace_id: int, span_id: int) -> str:
    """The W3C ``traceparent`` value of a sampled span (version 00, flags 01)."""
    return f"00-{trace_id:032x}-{span_id:016x}-01"


def job_traceparent(manifest: Manifest, job_id: str, attempt: int = 0) -> str | None:
    """The context a job of this run carries through its stages: None unless the run is
    traced live (``Manifest.traces``) and the job is sampled."""
    if manifest.traces is None or not is_sampled(job_id, manifest.traces):
        return None
    return traceparent(*job_span_ids(manifest.run_id, job_id, attempt))


def attrs(pairs: dict[str, Any]) -> dict[str, Any]:
    """OpenTelemetry attribute values: str, bool, int, float or lists of them; None left out."""
    out: dict[str, Any] = {}
    for key, value in pairs.items():
        if value is None or value == []:
            continue
        out[key] = value if isinstance(value, str | bool | int | float | list) else str(value)
    return out


def stage_attrs(stage: str, row: dict[str, Any]) -> dict[str, Any]:
    """A span's attributes from a row (or the part of one a stage knows), by span name:
    a stage's (``retrieve``, ``generate``, ``verify``), else the job's own span."""
    usage = row.get("usage") or {}
    if stage == keys.RETRIEVE.name:
        return attrs(
            {
                "qfarm.retriever": row.get("retriever"),
                "qfarm.index_version": row.get("index_version"),
                "qfarm.evidence_count": len(row.get("evidence_ids") or []),
                "qfarm.retrieval_ms": (row.get("timings") or {}).get("retrieval_ms"),
            }
        )
    if stage == keys.GENERATE.name:
        return attrs(
            {
                "qfarm.endpoint": row.get("endpoint"),
                "gen_ai.request.model": row.get("model"),
                "gen_ai.usage.input_tokens": usage.get("prompt_tokens"),
                "gen_ai.usage.output_tokens": usage.get("completion_tokens"),
                "qfarm.tokens_estimated": usage.get("estimated"),
                "qfarm.attempts": row.get("attempts"),
                "qfarm.finish_reason": row.get("finish_reason"),
                "qfarm.prompts_in_request": (row.get("llm_request") or {}).get("prompts"),
                "qfarm.simulated": row.get("simulated"),
            }
        )
    if stage == keys.VERIFY.name:
        return attrs(
            {
                "qfarm.verdict": row.get("verdict"),
                "qfarm.label": row.get("label"),
                "qfarm.n_claims": row.get("n_claims"),
                "qfarm.n_verified": row.get("n_verified"),
                "qfarm.violation_kinds": list(row.get("violation_kinds") or []),
            }
        )
    return attrs(
        {
            "qfarm.run_id": row.get("run_id"),
            "qfarm.job_id": row.get("job_id"),
            "qfarm.question_id": row.get("question_id"),
            "qfarm.mode": row.get("mode"),
            "qfarm.sample_index": row.get("sample_index"),
            "qfarm.verdict": row.get("verdict"),
            "qfarm.worker": row.get("worker"),
            "qfarm.cache_hit": row.get("cache_hit"),
            "qfarm.error_kind": row.get("error_kind"),
        }
    )


def run_attrs(manifest: Manifest) -> dict[str, Any]:
    """The ``qfarm.run`` span's attributes."""
    return attrs(
        {
            "qfarm.run_id": manifest.run_id,
            "qfarm.model": manifest.model,
            "qfarm.endpoints": list(manifest.endpoints),
            "qfarm.index_version": manifest.index_version,
            "qfarm.modes": [m.value for m in manifest.modes],
            "qfarm.n": manifest.n,
            "qfarm.n_jobs": manifest.n_jobs,
            "qfarm.verifier_policy_hash": manifest.verifier_policy_hash,
            "qfarm.governance_policy_hash": manifest.governance_policy_hash,
            "qfarm.simulated": manifest.simulated,
        }
    )


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def stage_windows(row: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """(start, end) in epoch seconds of each stage the row's timings place, and ``job``."""
    start, end = _num(row.get("started_at")), _num(row.get("finished_at"))
    if start is None or end is None:
        return {}
    timings = row.get("timings") or {}
    out: dict[str, tuple[float, float]] = {"job": (start, max(start, end))}
    retrieval = _num(timings.get("retrieval_ms"))
    if retrieval is not None:
        out[keys.RETRIEVE.name] = (start, min(end, start + retrieval / 1000))
    request = row.get("llm_request") or {}
    sent, ms, llm = (
        _num(request.get("sent_at")),
        _num(request.get("ms")),
        _num(timings.get("llm_ms")),
    )
    if sent is not None and ms is not None:
        finished = min(end, sent + ms / 1000)
        out[keys.GENERATE.name] = (
            max(start, finished - (llm if llm is not None else ms) / 1000),
            finished,
        )
    verify = _num(timings.get("verify_ms"))
    if verify is not None:
        out[keys.VERIFY.name] = (max(start, end - verify / 1000), end)
    return out
