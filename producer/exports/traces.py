"""``qfarm export RUN --otlp``: each job of a run as an OpenTelemetry trace.

A job's trace is built from its row, after the run: a root span ``qfarm.job`` from the
job's first stage to its row (``started_at`` to ``finished_at``) and one child span per
stage that ran, placed by the row's own timings: ``retrieve`` (its first
``timings.retrieval_ms``), ``generate`` (``timings.llm_ms`` ending when the answering
request ended: slot waits and retries included; endpoint, model, tokens and attempts as
attributes) and ``verify`` (the last ``timings.verify_ms``). The rows are the record
that crosses every process of a distributed run, so a job answered by three workers is
one trace without the workers tracing anything, and nothing is added to a run's path.
A trace of the run itself (``qfarm.run``, manifest creation to the run's end) holds the
run's attributes; every job's root span links to it.

Sampling: a job is traced when a hash of its id falls under ``sample_ratio``, so the same
jobs are chosen on every export; the default ratio traces about ``DEFAULT_MAX_TRACES``
jobs however large the run. Spans go to the OTLP/HTTP endpoint given, else
``OTEL_EXPORTER_OTLP_ENDPOINT`` (the exporter's own variable), else its default
(``http://localhost:4318``). The library is the ``otel`` extra (opentelemetry-sdk and the
OTLP/HTTP exporter).
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

from qfarm.common.errors import InputError, ServiceError
from qfarm.common.models import Manifest
from qfarm.producer.exports.record import record_export, require_extra
from qfarm.producer.reports import ROWS, iter_rows
from qfarm.producer.runs import read_manifest, read_run_status

DEFAULT_MAX_TRACES = 1000
BATCH_SPANS = 512
NS = 1_000_000_000


def default_ratio(n_jobs: int) -> float:
    """Trace every job of a run up to ``DEFAULT_MAX_TRACES`` jobs, about that many beyond."""
    return 1.0 if n_jobs <= DEFAULT_MAX_TRACES else DEFAULT_MAX_TRACES / n_jobs


def is_sampled(job_id: str, ratio: float) -> bool:
    """The same answer for a job on every export: its id's hash against the ratio."""
    if ratio >= 1:
        return True
    fraction = int.from_bytes(hashlib.sha256(job_id.encode()).digest()[:8], "big") / 2**64
    return fraction < ratio


def _ns(seconds: float) -> int:
    return int(seconds * NS)


def _attrs(pairs: dict[str, Any]) -> dict[str, Any]:
    """OpenTelemetry attribute values: str, bool, int, float or lists of them; None left out."""
    out: dict[str, Any] = {}
    for key, value in pairs.items():
        if value is None or value == []:
            continue
        out[key] = value if isinstance(value, str | bool | int | float | list) else str(value)
    return out


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def stage_windows(row: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """(start, end) in epoch seconds of each stage the row's timings place."""
    start, end = _num(row.get("started_at")), _num(row.get("finished_at"))
    if start is None or end is None:
        return {}
    timings = row.get("timings") or {}
    out: dict[str, tuple[float, float]] = {"job": (start, max(start, end))}
    retrieval = _num(timings.get("retrieval_ms"))
    if retrieval is not None:
        out["retrieve"] = (start, min(end, start + retrieval / 1000))
    request = row.get("llm_request") or {}
    sent, ms, llm = _num(request.get("sent_at")), _num(request.get("ms")), _num(timings.get("llm_ms"))
    if sent is not None and ms is not None:
        finished = min(end, sent + ms / 1000)
        out["generate"] = (max(start, finished - (llm if llm is not None else ms) / 1000), finished)
    verify = _num(timings.get("verify_ms"))
    if verify is not None:
        out["verify"] = (max(start, end - verify / 1000), end)
    return out


def _stage_attrs(stage: str, row: dict[str, Any]) -> dict[str, Any]:
    usage = row.get("usage") or {}
    if stage == "retrieve":
        return _attrs({"qfarm.retriever": row.get("retriever"),
                       "qfarm.index_version": row.get("index_version"),
                       "qfarm.evidence_count": len(row.get("evidence_ids") or []),
                       "qfarm.retrieval_ms": (row.get("timings") or {}).get("retrieval_ms")})
    if stage == "generate":
        return _attrs({"qfarm.endpoint": row.get("endpoint"),
                       "gen_ai.request.model": row.get("model"),
                       "gen_ai.usage.input_tokens": usage.get("prompt_tokens"),
                       "gen_ai.usage.output_tokens": usage.get("completion_tokens"),
                       "qfarm.tokens_estimated": usage.get("estimated"),
                       "qfarm.attempts": row.get("attempts"),
                       "qfarm.finish_reason": row.get("finish_reason"),
                       "qfarm.prompts_in_request": (row.get("llm_request") or {}).get("prompts"),
                       "qfarm.simulated": row.get("simulated")})
    if stage == "verify":
        return _attrs({"qfarm.verdict": row.get("verdict"), "qfarm.label": row.get("label"),
                       "qfarm.n_claims": row.get("n_claims"),
                       "qfarm.n_verified": row.get("n_verified"),
                       "qfarm.violation_kinds": list(row.get("violation_kinds") or [])})
    return _attrs({"qfarm.run_id": row.get("run_id"), "qfarm.job_id": row.get("job_id"),
                   "qfarm.question_id": row.get("question_id"), "qfarm.mode": row.get("mode"),
                   "qfarm.sample_index": row.get("sample_index"),
                   "qfarm.verdict": row.get("verdict"), "qfarm.worker": row.get("worker"),
                   "qfarm.cache_hit": row.get("cache_hit"),
                   "qfarm.error_kind": row.get("error_kind")})


def _run_attrs(manifest: Manifest) -> dict[str, Any]:
    return _attrs({"qfarm.run_id": manifest.run_id, "qfarm.model": manifest.model,
                   "qfarm.endpoints": list(manifest.endpoints),
                   "qfarm.index_version": manifest.index_version,
                   "qfarm.modes": [m.value for m in manifest.modes], "qfarm.n": manifest.n,
                   "qfarm.n_jobs": manifest.n_jobs,
                   "qfarm.verifier_policy_hash": manifest.verifier_policy_hash,
                   "qfarm.governance_policy_hash": manifest.governance_policy_hash,
                   "qfarm.simulated": manifest.simulated})


def _exporter(endpoint: str | None) -> Any:
    require_extra("opentelemetry.exporter.otlp.proto.http.trace_exporter", "otel")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    if endpoint is None:
        return OTLPSpanExporter()
    # The exporter's own variable names the collector's base URL; the argument, the traces path.
    return OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces")


def _processor(exporter: Any) -> Any:
    """A span processor that hands the exporter batches of ``BATCH_SPANS`` ended spans, in
    this thread. The SDK's batch processor drops spans once its queue is full, and an
    export makes spans far faster than a collector takes them: here nothing is dropped, and
    memory holds one batch. It counts the batches the exporter failed to send, so an
    export that lost its spans does not report them sent."""
    from opentelemetry.sdk.trace import SpanProcessor

    class Batches(SpanProcessor):
        def __init__(self, exporter: Any) -> None:
            self.exporter, self.failed, self.sent = exporter, 0, 0
            self._batch: list[Any] = []

        def on_start(self, span: Any, parent_context: Any = None) -> None:
            pass

        def on_end(self, span: Any) -> None:
            self._batch.append(span)
            if len(self._batch) >= BATCH_SPANS:
                self._send()

        def _send(self) -> None:
            from opentelemetry.sdk.trace.export import SpanExportResult

            batch, self._batch = self._batch, []
            if batch and self.exporter.export(batch) != SpanExportResult.SUCCESS:
                self.failed += 1
            self.sent += len(batch)

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            self._send()
            return True

        def shutdown(self) -> None:
            self._send()
            self.exporter.shutdown()

    return Batches(exporter)


def export_traces(run_dir: Path, *, endpoint: str | None = None,
                  sample_ratio: float | None = None,
                  span_exporter: Any = None) -> dict[str, Any]:
    """Send the run's sampled jobs as traces to an OTLP endpoint (or ``span_exporter``);
    record the export in exports.json and return that entry."""
    require_extra("opentelemetry.sdk.trace", "otel")
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    if sample_ratio is not None and not (math.isfinite(sample_ratio) and 0 <= sample_ratio <= 1):
        raise InputError(f"--trace-sample-ratio {sample_ratio}: give a fraction from 0 to 1, "
                         "e.g. 0.01 for one job in a hundred")
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    ratio = default_ratio(manifest.n_jobs) if sample_ratio is None else sample_ratio
    exporter = span_exporter if span_exporter is not None else _exporter(endpoint)
    # A provider of this export's own: the caller's global tracing, if any, is left alone.
    provider = TracerProvider(resource=Resource.create({"service.name": "qfarm"}))
    processor = _processor(exporter)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("qfarm.exports.traces")
    status = read_run_status(run_dir)
    traced = rows = 0
    try:
        run_end = _num(status.get("finished_at"))
        run_span = tracer.start_span("qfarm.run", attributes=_run_attrs(manifest),
                                     start_time=_ns(manifest.created_at))
        link = trace.Link(run_span.get_span_context())
        last_end = manifest.created_at
        for line in iter_rows(run_dir / ROWS):
            row = line.row
            if row is None or not isinstance(row.get("job_id"), str):
                continue
            rows += 1
            last_end = max(last_end, _num(row.get("finished_at")) or last_end)
            if is_sampled(row["job_id"], ratio) and _trace_job(tracer, row, link):
                traced += 1
        run_span.end(end_time=_ns(run_end if run_end is not None else last_end))
    finally:
        provider.shutdown()
    where = endpoint or "OTEL_EXPORTER_OTLP_ENDPOINT"
    if processor.failed:
        raise ServiceError(f"traces: the OTLP exporter could not send {processor.failed} "
                           f"span batch(es) of {manifest.run_id} to {where} (its log lines say "
                           "why); check --otlp-endpoint and that a collector is listening")
    return record_export(run_dir, "otlp", endpoint=where,
                         sample_ratio=ratio, jobs_traced=traced, rows=rows)


def _trace_job(tracer: Any, row: dict[str, Any], link: Any) -> bool:
    """One job's trace; False when its row has no times to place it."""
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode

    windows = stage_windows(row)
    if "job" not in windows:
        return False
    start, end = windows.pop("job")
    # A root of its own (an empty context): one trace per job, linked to the run's.
    root = tracer.start_span("qfarm.job", context=trace.set_span_in_context(trace.INVALID_SPAN),
                             attributes=_stage_attrs("job", row), links=[link],
                             start_time=_ns(start))
    parent = trace.set_span_in_context(root)
    for stage, (s, e) in windows.items():
        span = tracer.start_span(stage, context=parent, attributes=_stage_attrs(stage, row),
                                 start_time=_ns(s))
        span.end(end_time=_ns(e))
    if row.get("error"):
        root.set_status(Status(StatusCode.ERROR, str(row["error"])[:500]))
    root.end(end_time=_ns(end))
    return True
