"""Live spans of a run traced live (worker/tracing.py): the job's context rides in its
record through every stage, bundle and redelivery; each stage's span is its child; the
job's span is sent once, by the row write that won. Task bodies run on an in-memory
Redis (fakeredis) with the SDK's in-memory exporter."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import fakeredis
import pytest

from qfarm.common import keys
from qfarm.common.jobs import expand_jobs, job_from_ref, ref_for
from qfarm.common.models import Generation, JobRef, LlmRequest, Mode, Question, Usage
from qfarm.common.policy import Policy
from qfarm.common.settings import Settings
from qfarm.common.traces import job_span_ids, job_traceparent, run_span_ids
from qfarm.producer.runs.sweep import make_manifest
from qfarm.producer.store import ProducerStore
from qfarm.worker import encoding, flow, tracing


class Answering:
    """A gateway answering every prompt at once, as an endpoint would say it did."""

    def __init__(self) -> None:
        self.calls = 0

    def generate(self, prompt, sampling, *, job_id):
        self.calls += 1
        sent = time.time()
        return Generation(
            text='"Jazz is a music genre" [E1]',
            endpoint="http://gpu1:8000",
            attempts=2,
            usage=Usage(prompt_tokens=120, completion_tokens=9),
            request=LlmRequest(sent_at=sent, ms=1.0),
            llm_ms=1.5,
        )

    def generate_many(self, items):
        return [self.generate(p, s, job_id=j) for p, s, j in items]


def a_manifest(traces: float | None):
    return make_manifest(
        run_id="r",
        question_file="-",
        question_file_digest="-",
        n_questions=1,
        modes=[Mode.QUOTE],
        n=1,
        policy=Policy(),
        model="m",
        endpoints=[],
        simulated=True,
        retriever="embedded",
        index_version=None,
        corpus=None,
        eager=False,
        traces=traces,
    )


def a_ref(n: int = 1) -> list[dict]:
    jobs = expand_jobs(
        "r", [Question(id="q", text="What is jazz?")], [Mode.QUOTE], n, Policy(), model="m"
    )
    return [ref_for(job).model_dump(mode="json", exclude_none=True) for job in jobs]


@pytest.fixture
def spans(export_extra):
    memory = export_extra("opentelemetry.sdk.trace.export.in_memory_span_exporter")
    exporter = memory.InMemorySpanExporter()
    tracing.reset()  # forget the runs other tests named "r" untraced
    tracing.use_exporter(exporter)
    yield exporter
    tracing.reset()


@pytest.fixture
def farm(default_index):
    """Services over fakeredis, a traced run's manifest stored, a send that keeps what a
    stage forwards (each hop as the JSON string that travels)."""
    from qfarm.worker.celery import configure_app
    from qfarm.worker.retrieval import open_retriever
    from qfarm.worker.services import Services, install_services
    from qfarm.worker.store import WorkerStore

    client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    settings = Settings(index_path=default_index)  # type: ignore[call-arg]
    configure_app(settings, eager=True)
    gateway = Answering()
    svc = Services(
        settings=settings,
        store=WorkerStore(client),
        worker_name="t",
        retriever_factory=lambda: open_retriever(settings),
        gateway_factory=lambda: gateway,
    )
    install_services(svc)
    ProducerStore(client).put_manifest(a_manifest(traces=1.0))
    sent: list[tuple[keys.Stage, str]] = []
    yield (
        svc,
        ProducerStore(client),
        (lambda stage, records: sent.append((stage, encoding.dump_records(records)))),
        sent,
    )
    install_services(None)


def by_name(exporter, name: str) -> list:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def test_stage_spans_are_children_of_the_job_span_across_hops_and_redelivery(farm, spans):
    svc, store, send, sent = farm
    refs = a_ref(n=2)  # one bundle of two jobs
    flow.handle_stage(keys.RETRIEVE, refs, svc, send)
    flow.handle_stage(keys.RETRIEVE, refs, svc, send)  # the message redelivered before any row
    (_, to_generate), (_, again) = sent
    carried = re.findall(r'"traceparent":"([^"]+)"', to_generate)
    assert len(set(carried)) == 2 and re.findall(r'"traceparent":"([^"]+)"', again) == carried
    sent.clear()
    flow.handle_stage(keys.GENERATE, to_generate, svc, send)
    ((_, to_verify),) = sent
    for _ in range(2):  # verify's message delivered twice: one row, so one job span
        flow.handle_stage(keys.VERIFY, to_verify, svc, send)

    rows = {json.loads(r)["job_id"]: json.loads(r) for r in store.read_rows("r", 0)}
    assert len(rows) == 2
    jobs = {s.attributes["qfarm.job_id"]: s for s in by_name(spans, "qfarm.job")}
    assert set(jobs) == set(rows)  # one job span each, though verify ran twice
    for job_id, job in jobs.items():
        trace_id, span_id = job_span_ids("r", job_id)
        assert (job.context.trace_id, job.context.span_id) == (trace_id, span_id)
        assert job.parent is None
        assert [(link.context.trace_id, link.context.span_id) for link in job.links] == [
            run_span_ids("r")
        ]
        children = sorted(
            (
                s
                for s in spans.get_finished_spans()
                if s.parent is not None and s.parent.span_id == span_id
            ),
            key=lambda s: s.start_time,
        )
        # Both deliveries of retrieve and of verify are in the job's one trace.
        assert [s.name for s in children] == [
            "retrieve",
            "retrieve",
            "generate",
            "verify",
            "verify",
        ]
        assert {s.context.trace_id for s in children} == {trace_id}
        for before, after in zip(children[1:], children[2:], strict=False):
            assert before.end_time <= after.start_time
        generate = children[2]
        row = rows[job_id]
        assert generate.attributes["qfarm.endpoint"] == row["endpoint"] == "http://gpu1:8000"
        assert generate.attributes["gen_ai.usage.input_tokens"] == row["usage"]["prompt_tokens"]
        assert generate.attributes["gen_ai.usage.output_tokens"] == 9
        assert generate.attributes["qfarm.attempts"] == row["attempts"] == 2
        assert children[-1].attributes["qfarm.verdict"] == row["verdict"]
        assert job.attributes["qfarm.verdict"] == row["verdict"]
        assert children[0].attributes["qfarm.evidence_count"] == len(row["evidence_ids"])


def test_the_traceparent_is_the_propagators_own_and_the_same_on_every_delivery(export_extra):
    propagation = export_extra("opentelemetry.trace.propagation.tracecontext")
    from opentelemetry import trace

    manifest = a_manifest(traces=1.0)
    ref = JobRef.model_validate(a_ref()[0])
    job = job_from_ref(ref, manifest)
    assert job_from_ref(ref, manifest).traceparent == job.traceparent  # a redelivery
    propagator = propagation.TraceContextTextMapPropagator()
    context = trace.get_current_span(propagator.extract({"traceparent": job.traceparent}))
    span = context.get_span_context()
    assert (span.trace_id, span.span_id) == job_span_ids("r", job.job_id)
    assert span.trace_flags.sampled and span.is_remote
    carrier: dict[str, str] = {}
    propagator.inject(carrier, context=trace.set_span_in_context(context))
    assert carrier == {"traceparent": job.traceparent}
    # A --retry-errors attempt is a trace of its own.
    retried = job_from_ref(ref.model_copy(update={"r": ("llm",)}), manifest)
    assert retried.traceparent not in (None, job.traceparent)


def test_only_sampled_jobs_carry_a_context() -> None:
    ids = [f"job-{i}" for i in range(2000)]
    carried = [j for j in ids if job_traceparent(a_manifest(traces=0.1), j)]
    assert 120 <= len(carried) <= 280  # about a tenth, the same jobs in every process
    assert carried == [j for j in ids if job_traceparent(a_manifest(traces=0.1), j)]
    assert not any(job_traceparent(a_manifest(traces=None), j) for j in ids)


def test_an_untraced_run_adds_no_field_and_imports_no_opentelemetry() -> None:
    """Its jobs' messages carry no trace field, and a worker handling them (the task module,
    the stage hooks) never imports OpenTelemetry."""
    script = """
import sys, time

asked = []


class NoOpenTelemetry:  # the base install: no otel extra (redis-py asks for it, optionally)
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "opentelemetry":
            asked.append(name)
            raise ImportError(name)


sys.meta_path.insert(0, NoOpenTelemetry())
from qfarm.common.jobs import expand_jobs, job_from_ref, ref_for
from qfarm.common.models import JobRecord, Mode, Question, Row
from qfarm.common.policy import Policy
from qfarm.producer.runs.sweep import make_manifest
from qfarm.worker import celery, encoding, flow, tracing

asked.clear()  # what the imports asked for; from here on, the run's own path
manifest = make_manifest(run_id="r", question_file="-", question_file_digest="-", n_questions=1,
    modes=[Mode.QUOTE], n=1, policy=Policy(), model="m", retriever="embedded", eager=False)
(job,) = expand_jobs("r", [Question(id="q", text="What is jazz?")], [Mode.QUOTE], 1, Policy(),
                     model="m")
ref = ref_for(job).model_dump(mode="json", exclude_none=True)
job = job_from_ref(ref_for(job), manifest)
record = JobRecord(job=job, started_at=time.time())
payload = encoding.dump_records([record])
row = Row(run_id="r", job_id=job.job_id, question="q", question_id="q", mode=Mode.QUOTE,
          sample_index=0, started_at=1.0, finished_at=2.0)
tracing.stage_spans("retrieve", [record], 1.0, 2.0)
tracing.job_spans([row], [row.model_dump_json()], [True], lambda run_id: manifest)
assert "traceparent" not in payload and "tp" not in ref, (payload, ref)
assert "traces" not in manifest.model_dump_json()
assert asked == [], asked
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


def test_a_worker_without_an_exporter_sends_nothing_and_says_so(monkeypatch, caplog, export_extra):
    export_extra("opentelemetry.sdk.trace")
    tracing.reset()
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    from qfarm.common.models import JobRecord

    job = job_from_ref(JobRef.model_validate(a_ref()[0]), a_manifest(traces=1.0))
    try:
        with caplog.at_level("WARNING", logger="qfarm.worker"):
            for _ in range(3):
                tracing.stage_spans("retrieve", [JobRecord(job=job)], 1.0, 2.0)
        said = [
            r.getMessage()
            for r in caplog.records
            if "OTEL_EXPORTER_OTLP_ENDPOINT" in r.getMessage()
        ]
        assert len(said) == 1  # once per process, not per job
    finally:
        tracing.reset()
