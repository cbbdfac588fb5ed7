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

A run traced live (``QFARM_OTEL`` on a distributed sweep: ``Manifest.traces``) had its
sampled jobs' traces sent by the workers as they ran (``qfarm.worker.tracing``). Its
export sends the ``qfarm.run`` span those jobs' spans link to (its ids are known ahead;
sent by the first export of the run only), and from rows only the jobs the live ratio
left out, so no job's trace is sent twice.

Sampling: a job is traced when a hash of its id falls under ``sample_ratio``, so the same
jobs are chosen on every export; the default ratio traces about ``DEFAULT_MAX_TRACES``
jobs however large the run. Spans go to the OTLP/HTTP endpoint given, else
``OTEL_EXPORTER_OTLP_ENDPOINT`` (the exporter's own variable), else its default
(``http://localhost:4318``). The library is the ``otel`` extra (opentelemetry-sdk and the
OTLP/HTTP exporter).
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Any

from qfarm.common.errors import InputError, ServiceError
from qfarm.common.traces import (
    default_ratio,
    is_sampled,
    run_attrs,
    run_span_ids,
    stage_attrs,
    stage_windows,
)
from qfarm.common.vocab import SpanName
from qfarm.producer.reports.exports.record import read_exports, record_export, require_extra
from qfarm.producer.reports.rows import ROWS, iter_rows
from qfarm.producer.rundir import read_manifest, read_status
from qfarm.worker import tracing

# Kept importable from here: the export's tests and callers name them so.
__all__ = ["default_ratio", "export_traces", "is_sampled", "stage_windows"]

BATCH_SPANS = 512
NS = 1_000_000_000


def _ns(seconds: float) -> int:
    return int(seconds * NS)


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


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
    live = manifest.traces
    # A run traced live: its workers sent the sampled jobs' traces, and their job spans
    # link to a run span with ids known ahead. Sent here once (the first export after the
    # run); from rows, only the jobs the live ratio left out.
    run_span_due = live is None or not any(
        e.get("kind") == "otlp" and e.get("run_span") for e in read_exports(run_dir))
    # A provider of this export's own: the caller's global tracing, if any, is left alone.
    provider = TracerProvider(resource=Resource.create({"service.name": "qfarm"}),
                              id_generator=tracing.id_generator())
    processor = _processor(exporter)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("qfarm.exports.traces")
    status = read_status(run_dir)
    traced = rows = 0
    try:
        run_end = status.finished_at
        with tracing.named_ids(run_span_ids(manifest.run_id)) if live is not None \
                else contextlib.nullcontext():
            run_span = tracer.start_span(SpanName.RUN.value, attributes=run_attrs(manifest),
                                         start_time=_ns(manifest.created_at))
        link = trace.Link(run_span.get_span_context()) if live is None \
            else tracing.run_link(manifest.run_id)
        last_end = manifest.created_at
        for line in iter_rows(run_dir / ROWS):
            row = line.row
            if row is None or not isinstance(row.get("job_id"), str):
                continue
            rows += 1
            last_end = max(last_end, _num(row.get("finished_at")) or last_end)
            if live is not None and is_sampled(row["job_id"], live):
                continue  # its trace was sent live by the workers
            if is_sampled(row["job_id"], ratio) and _trace_job(tracer, row, link):
                traced += 1
        if run_span_due:
            run_span.end(end_time=_ns(run_end if run_end is not None else last_end))
    finally:
        provider.shutdown()
    where = endpoint or "OTEL_EXPORTER_OTLP_ENDPOINT"
    if processor.failed:
        raise ServiceError(f"traces: the OTLP exporter could not send {processor.failed} "
                           f"span batch(es) of {manifest.run_id} to {where} (its log lines say "
                           "why); check --otlp-endpoint and that a collector is listening")
    extra = {} if live is None else {"live_sample_ratio": live, "run_span": run_span_due}
    return record_export(run_dir, "otlp", endpoint=where,
                         sample_ratio=ratio, jobs_traced=traced, rows=rows, **extra)


def _trace_job(tracer: Any, row: dict[str, Any], link: Any) -> bool:
    """One job's trace; False when its row has no times to place it."""
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode

    windows = stage_windows(row)
    if "job" not in windows:
        return False
    start, end = windows.pop("job")
    # A root of its own (an empty context): one trace per job, linked to the run's.
    root = tracer.start_span(SpanName.JOB.value, context=trace.set_span_in_context(trace.INVALID_SPAN),
                             attributes=stage_attrs(SpanName.JOB, row), links=[link],
                             start_time=_ns(start))
    parent = trace.set_span_in_context(root)
    for stage, (s, e) in windows.items():
        span = tracer.start_span(stage, context=parent, attributes=stage_attrs(stage, row),
                                 start_time=_ns(s))
        span.end(end_time=_ns(e))
    if row.get("error"):
        root.set_status(Status(StatusCode.ERROR, str(row["error"])[:500]))
    root.end(end_time=_ns(end))
    return True
