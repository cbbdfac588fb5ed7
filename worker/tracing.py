"""Live spans of the jobs of a run traced live (docs/reports.md, 'Exports'; the workers'
exporter: docs/deployment.md, 'Traces from the workers').

A run is traced live when its manifest says so (``Manifest.traces``, a sample ratio): a
sampled job then carries a W3C ``traceparent`` in its record (``Job.traceparent``, set
by ``common.jobs.job_from_ref`` from the manifest), from stage to stage, through every
bundle and re-send. Each stage's span (``stage_spans``: retrieve, generate, verify) is a
child of that context, opened by whichever worker ran the stage; the job's own span
(``job_spans``) is sent by the process whose row write won (the write is set-if-absent,
so a redelivered message adds no second one), with the ids the traceparent named
(``common.traces.job_span_ids``), so stages and job meet in one trace per job without any
process asking another. The job's span links to the run's span, which the producer sends
when the run ends (``qfarm.producer.reports.exports.traces``).

Why not the Celery instrumentation (opentelemetry-instrumentation-celery): it makes one
span per task message and carries one context in the message's headers, while a message
here holds a bundle of jobs of as many traces, and a stage forwards the bundle's
survivors as a new message; a job's context must ride with the job.

This module imports nothing of OpenTelemetry until a traced job reaches the process, so an
untraced run, and an install without the ``otel`` extra, pay a ``None`` check per record.
The spans go to ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``) through the
SDK's batch processor; a worker without either, or without the extra, sends no span and
says so once in its log. Spans are made after the step ran, with its measured times: a
failure here is logged and never touches a job.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from typing import Any

from qfarm.common import keys
from qfarm.common.models import JobRecord, Manifest, Row
from qfarm.common.traces import (
    is_sampled,
    job_span_ids,
    run_span_ids,
    stage_attrs,
    stage_windows,
)
from qfarm.common.urls import redact_url
from qfarm.common.vocab import SpanName

log = logging.getLogger("qfarm.worker")

NS = 1_000_000_000
SERVICE_NAME = "qfarm-worker"
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")

_lock = threading.Lock()
_state: dict[str, Any] = {}  # "tracer", "provider" once set up; "off" when it cannot be
# The ids the next span must have (the job's span, named ahead by its traceparent).
_forced_ids: ContextVar[tuple[int, int] | None] = ContextVar("qfarm_forced_ids", default=None)
# The live sample ratio of each run seen (None: not traced), so an untraced run's rows cost
# one manifest lookup per run in this process, not one per bundle.
_ratios: OrderedDict[str, float | None] = OrderedDict()
_RATIOS_KEPT = 256


def _ns(seconds: float) -> int:
    return int(seconds * NS)


@contextlib.contextmanager
def named_ids(ids: tuple[int, int]) -> Iterator[None]:
    """The span started inside takes these (trace id, span id), when its provider's id
    generator is ``id_generator()``: a span whose ids a traceparent or a link named ahead."""
    token = _forced_ids.set(ids)
    try:
        yield
    finally:
        _forced_ids.reset(token)


def id_generator() -> Any:
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class NamedIds(RandomIdGenerator):
        """Random ids, except for a span whose ids a traceparent named ahead."""

        def generate_trace_id(self) -> int:
            forced = _forced_ids.get()
            return forced[0] if forced else super().generate_trace_id()

        def generate_span_id(self) -> int:
            forced = _forced_ids.get()
            return forced[1] if forced else super().generate_span_id()

    return NamedIds()


def _install(processor: Any) -> Any:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    # A provider of qfarm's own: the process's global tracing, if any, is left alone, and
    # no other span can take the ids a job's traceparent named.
    provider = TracerProvider(
        resource=Resource.create({"service.name": SERVICE_NAME, "process.pid": os.getpid()}),
        id_generator=id_generator(),
    )
    provider.add_span_processor(processor)
    _state.clear()
    _state.update(provider=provider, tracer=provider.get_tracer("qfarm.worker"))
    return provider


def use_exporter(exporter: Any, *, batch: bool = False) -> Any:
    """Send this process's live spans to ``exporter``, each as it ends, or in the SDK's
    batches from its own thread with ``batch`` (as a worker sends them): tests use the
    SDK's in-memory exporter, an embedding application an exporter of its choice. Returns
    the tracer provider."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    with _lock:
        shutdown()
        return _install(BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter))


def shutdown() -> None:
    """Send the spans still batched and stop (a worker process ending)."""
    provider = _state.get("provider")
    _state.clear()
    if provider is not None:
        provider.shutdown()


def _tracer() -> Any | None:
    """This process's tracer, set up at the first traced job; None when it cannot send."""
    if "tracer" in _state or "off" in _state:
        return _state.get("tracer")
    with _lock:
        if "tracer" in _state or "off" in _state:
            return _state.get("tracer")
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError:
            log.warning(
                "a job of a traced run reached this worker, which lacks the otel extra "
                "(pip install 'qfarm[otel]'): it sends no span"
            )
            _state["off"] = True
            return None
        if not any(os.environ.get(name) for name in ENDPOINT_VARIABLES):
            log.warning(
                "a job of a traced run reached this worker, which has no "
                "OTEL_EXPORTER_OTLP_ENDPOINT: it sends no span, and the traces of the "
                "jobs it handles lack its stages "
                "(docs/deployment.md, 'Traces from the workers')"
            )
            _state["off"] = True
            return None
        # The exporter reads the OTEL_EXPORTER_OTLP_* variables itself (endpoint, headers).
        _install(BatchSpanProcessor(OTLPSpanExporter()))
        return _state["tracer"]


def _facts(stage: str, record: JobRecord) -> dict[str, Any]:
    """What a stage knows of the job, under the row's field names (``stage_attrs`` reads
    them), so a live span has the attributes the export from rows gives it."""
    timings = record.timings
    if stage == keys.RETRIEVE.name and record.retrieval is not None:
        ret = record.retrieval
        return {
            "retriever": ret.backend,
            "index_version": ret.index_version,
            "evidence_ids": [e.id for e in ret.evidence],
            "timings": {"retrieval_ms": timings.retrieval_ms},
        }
    if stage == keys.GENERATE.name and record.generation is not None:
        gen = record.generation
        return {
            "endpoint": redact_url(gen.endpoint) if gen.endpoint else None,
            "model": record.job.model,
            "usage": gen.usage.model_dump(),
            "attempts": gen.attempts,
            "finish_reason": gen.finish_reason,
            "llm_request": gen.request.model_dump() if gen.request else None,
            "simulated": gen.simulated,
        }
    if stage == keys.VERIFY.name and record.verification is not None:
        ver = record.verification
        return {
            "verdict": ver.verdict.value,
            "label": ver.label.value,
            "n_claims": ver.n_claims,
            "n_verified": ver.n_verified,
            "violation_kinds": [k.value for k in ver.violation_kinds],
        }
    return {}


def _window(stage: str, record: JobRecord, start: float, end: float) -> tuple[float, float]:
    """The job's own part of a bundle's step, placed by its timings as the export places it
    from the row; the whole step when they say nothing."""
    timings = record.timings
    if stage == keys.RETRIEVE.name and timings.retrieval_ms is not None:
        return start, min(end, start + timings.retrieval_ms / 1000)
    gen = record.generation
    if stage == keys.GENERATE.name and gen is not None and gen.request is not None:
        finished = min(end, gen.request.sent_at + gen.request.ms / 1000)
        took = (timings.llm_ms if timings.llm_ms is not None else gen.request.ms) / 1000
        return max(start, finished - took), max(start, finished)
    if stage == keys.VERIFY.name and timings.verify_ms is not None:
        return max(start, end - timings.verify_ms / 1000), end
    return start, end


def stage_spans(stage: str, records: Sequence[JobRecord], start: float, end: float) -> None:
    """A span named ``stage`` for each traced job of a bundle's step that ran from
    ``start`` to ``end`` (epoch seconds), a child of the job's traceparent."""
    traced = [r for r in records if r.job.traceparent]
    if traced:
        _with_tracer(f"{stage} spans", lambda tracer: _stage_spans(tracer, stage, traced, start, end))


def _stage_spans(
    tracer: Any, stage: str, traced: Sequence[JobRecord], start: float, end: float
) -> None:  # fmt: skip
    from opentelemetry.trace import Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    propagator = TraceContextTextMapPropagator()
    for record in traced:
        parent = propagator.extract({"traceparent": record.job.traceparent or ""})
        begun, ended = _window(stage, record, start, end)
        span = tracer.start_span(
            stage,
            context=parent,
            start_time=_ns(begun),
            attributes=stage_attrs(stage, _facts(stage, record)),
        )
        if record.error:
            span.set_status(Status(StatusCode.ERROR, record.error[:500]))
        span.end(end_time=_ns(ended))


def _with_tracer(what: str, send: Callable[[Any], None]) -> None:
    """``send(tracer)`` when this process has a tracer; a failure is logged, never raised:
    a span must never cost a job its row."""
    try:
        tracer = _tracer()
        if tracer is not None:
            send(tracer)
    except Exception:
        log.warning("could not record the %s of a bundle", what, exc_info=True)


def _ratio(run_id: str, manifest_of: Callable[[str], Manifest | None]) -> float | None:
    if run_id in _ratios:
        _ratios.move_to_end(run_id)
        return _ratios[run_id]
    try:
        manifest = manifest_of(run_id)
    except Exception:  # an unreadable or unreachable manifest: the row is what matters
        return None
    ratio = manifest.traces if manifest is not None else None
    _ratios[run_id] = ratio
    while len(_ratios) > _RATIOS_KEPT:
        _ratios.popitem(last=False)
    return ratio


def job_spans(
    rows: Sequence[Row],
    jsons: Sequence[str],
    wrote: Sequence[bool],
    manifest_of: Callable[[str], Manifest | None],
) -> None:
    """The ``qfarm.job`` span of each sampled job of a live-traced run whose row this
    process wrote (``wrote``: the row write's set-if-absent said so), from the row as
    written (``jsons``), with the ids its stages' traceparent named."""
    traced = [
        raw
        for row, raw, w in zip(rows, jsons, wrote, strict=True)
        if w and _is_traced(row, manifest_of)
    ]
    if not traced:
        return

    def send(tracer: Any) -> None:
        for raw in traced:
            _job_span(tracer, json.loads(raw))

    _with_tracer("job spans", send)


def _is_traced(row: Row, manifest_of: Callable[[str], Manifest | None]) -> bool:
    ratio = _ratio(row.run_id, manifest_of)
    return ratio is not None and is_sampled(row.job_id, ratio)


def run_link(run_id: str) -> Any:
    """A link to a live-traced run's ``qfarm.run`` span (sent by the producer when the run
    ends: its ids are known ahead)."""
    from opentelemetry import trace

    run_trace, run_span = run_span_ids(run_id)
    return trace.Link(
        trace.SpanContext(
            run_trace,
            run_span,
            is_remote=True,
            trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
        )
    )


def _job_span(tracer: Any, row: dict[str, Any]) -> None:
    from opentelemetry import context
    from opentelemetry.trace import Status, StatusCode

    windows = stage_windows(row)
    if "job" not in windows:
        return
    start, end = windows["job"]
    link = run_link(row["run_id"])
    ids = job_span_ids(row["run_id"], row["job_id"], len(row.get("retried_errors") or ()))
    with named_ids(ids):
        # An empty context: the job's span is its trace's root.
        span = tracer.start_span(
            SpanName.JOB.value,
            context=context.Context(),
            links=[link],
            attributes=stage_attrs(SpanName.JOB, row),
            start_time=_ns(start),
        )
    if row.get("error"):
        span.set_status(Status(StatusCode.ERROR, str(row["error"])[:500]))
    span.end(end_time=_ns(end))


def reset() -> None:
    """Forget this process's set-up and the runs seen (tests)."""
    with _lock:
        shutdown()
        _ratios.clear()
