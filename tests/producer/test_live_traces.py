"""Live traces of a distributed sweep (docs/reports.md, 'Exports'): real Celery workers on
the test's Redis database, each sampled job one trace whose stage spans come from the
workers that ran them.

Two ways: a worker in this process (Celery's ``start_worker``) with the SDK's in-memory
exporter, and real ``celery worker`` processes, split by queue, sending OTLP/HTTP to a
receiver this test runs. The OpenTelemetry Collector is Go source (its modules are on the
Go module proxy, to be compiled: minutes of this machine's two cores, and Go added to
``make install-test``), so the receiver is the test's own: it decodes the exporter's
protobuf with opentelemetry-proto, which the exporter depends on."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import redis

from qfarm.common.models import Mode
from qfarm.common.traces import job_span_ids, run_span_ids
from qfarm.common.vocab import ExitCode
from tests.producer.test_distributed import QUESTIONS, run_id_from, write_questions

pytestmark = pytest.mark.slow

MODES = (Mode.QUOTE, Mode.CLAIM_LATTICE)
# The database the farm fixture uses (tests/producer/conftest.py): flushed around each test.
REDIS_URL = "redis://127.0.0.1:{}/{}".format(
    os.environ.get("QFARM_TEST_REDIS_PORT", "6379"), os.environ.get("QFARM_TEST_REDIS_DB", "9")
)
STAGES = ["retrieve", "generate", "verify"]


@pytest.fixture
def memory_spans(export_extra) -> Iterator:
    from qfarm.worker import tracing

    memory = export_extra("opentelemetry.sdk.trace.export.in_memory_span_exporter")
    exporter = memory.InMemorySpanExporter()
    tracing.reset()
    tracing.use_exporter(exporter)
    yield exporter
    tracing.reset()


def check_job_traces(spans: list[dict], rows: list[dict], run_id: str) -> None:
    """One trace per job: its ``qfarm.job`` span (the ids its traceparent named, linked to
    the run's span) and under it retrieve, generate and verify, one after the other."""
    by_trace: dict[int, list[dict]] = defaultdict(list)
    for span in spans:
        by_trace[span["trace_id"]].append(span)
    assert len(by_trace) == len(rows)
    for row in rows:
        trace_id, span_id = job_span_ids(run_id, row["job_id"])
        trace = by_trace[trace_id]
        (job,) = [s for s in trace if s["name"] == "qfarm.job"]
        assert job["span_id"] == span_id and not job["parent"]
        assert job["links"] == [run_span_ids(run_id)]
        assert job["attributes"]["qfarm.job_id"] == row["job_id"]
        assert job["attributes"]["qfarm.verdict"] == row["verdict"]
        stages = sorted((s for s in trace if s is not job), key=lambda s: s["start"])
        assert [s["name"] for s in stages] == STAGES
        assert all(s["parent"] == span_id for s in stages)
        assert job["start"] <= stages[0]["start"]
        for before, after in zip(stages, stages[1:], strict=False):
            assert before["end"] <= after["start"]
        generate = stages[1]["attributes"]
        assert generate["qfarm.endpoint"] == row["endpoint"]
        assert generate["gen_ai.usage.input_tokens"] == row["usage"]["prompt_tokens"]
        assert generate["gen_ai.usage.output_tokens"] == row["usage"]["completion_tokens"]
        assert generate["qfarm.attempts"] == row["attempts"]
        assert stages[2]["attributes"]["qfarm.verdict"] == row["verdict"]


def sdk_span(span) -> dict:
    return {
        "name": span.name,
        "trace_id": span.context.trace_id,
        "span_id": span.context.span_id,
        "parent": span.parent.span_id if span.parent else None,
        "links": [(link.context.trace_id, link.context.span_id) for link in span.links],
        "attributes": dict(span.attributes),
        "start": span.start_time,
        "end": span.end_time,
    }


def test_a_worker_in_this_process_traces_each_job_of_a_distributed_sweep(
    memory_spans, simulator_url, default_index, tmp_path
) -> None:
    from celery.contrib.testing.worker import start_worker

    from qfarm.common.settings import Settings
    from qfarm.producer import SweepSpec, run_sweep
    from qfarm.producer.api import QuestionSet
    from qfarm.producer.exports.traces import export_traces
    from qfarm.worker.celery import configure_app
    from qfarm.worker.services import build_services, install_services

    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    settings = Settings(
        redis_url=REDIS_URL,
        llm_endpoints=simulator_url,  # type: ignore[call-arg]
        index_path=default_index,
        results_dir=tmp_path / "results",
        otel=True,
        bundle_size=2,
    )
    app = configure_app(settings)
    install_services(build_services(settings))
    questions = QuestionSet.from_file(write_questions(tmp_path / "q.txt", QUESTIONS[:3]))
    try:
        with start_worker(
            app,
            pool="threads",
            concurrency=2,
            perform_ping_check=False,
            queues=STAGES,
            shutdown_timeout=30,
            loglevel="WARNING",
        ):
            result = run_sweep(
                SweepSpec(questions=questions, modes=MODES, n=2, use_cache=False), settings=settings
            )
    finally:
        install_services(None)
        client.flushdb()
    assert result.status == "complete"
    assert result.manifest.traces == 1.0  # a small run: every job
    rows = [json.loads(line) for line in result.rows_path.read_text().splitlines()]
    assert len(rows) == 12
    check_job_traces(
        [sdk_span(s) for s in memory_spans.get_finished_spans()], rows, result.manifest.run_id
    )

    # After the run: the run's span, with the ids the jobs link to, and no job again.
    memory_spans.clear()
    entry = export_traces(result.run_dir, span_exporter=memory_spans)
    (run_span,) = memory_spans.get_finished_spans()
    assert run_span.name == "qfarm.run"
    assert (run_span.context.trace_id, run_span.context.span_id) == run_span_ids(
        result.manifest.run_id
    )
    assert entry["jobs_traced"] == 0 and entry["run_span"] and entry["live_sample_ratio"] == 1.0
    memory_spans.clear()
    export_traces(result.run_dir, span_exporter=memory_spans)  # a second export: nothing again
    assert memory_spans.get_finished_spans() == ()


class Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP traces endpoint (``POST /v1/traces``, protobuf) keeping what it got."""

    def __init__(self, port: int) -> None:
        self.spans: list[dict] = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", port), _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
            ExportTraceServiceResponse,
        )

        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        got = []
        for resource in request.resource_spans:
            service = {a.key: _value(a.value) for a in resource.resource.attributes}
            for scope in resource.scope_spans:
                for span in scope.spans:
                    got.append(
                        {
                            "service": service.get("service.name"),
                            "pid": service.get("process.pid"),
                            "name": span.name,
                            "trace_id": int.from_bytes(span.trace_id, "big"),
                            "span_id": int.from_bytes(span.span_id, "big"),
                            "parent": int.from_bytes(span.parent_span_id, "big") or None,
                            "links": [
                                (
                                    int.from_bytes(k.trace_id, "big"),
                                    int.from_bytes(k.span_id, "big"),
                                )
                                for k in span.links
                            ],
                            "attributes": {a.key: _value(a.value) for a in span.attributes},
                            "start": span.start_time_unix_nano,
                            "end": span.end_time_unix_nano,
                        }
                    )
        with self.server.lock:
            self.server.spans.extend(got)
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args: object) -> None:
        pass


def _value(value):
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


@pytest.fixture
def receiver(unused_port, export_extra) -> Iterator[Receiver]:
    export_extra("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
    server = Receiver(unused_port)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_worker_processes_split_by_queue_send_one_trace_per_job(farm, receiver, tmp_path):
    """``qfarm sweep`` with QFARM_OTEL=1: the retrieve and verify worker and the generate
    worker are two processes, each sending its stages' spans; the sweep sends the run's."""
    farm.env.update(
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{receiver.server_port}",
        OTEL_BSP_SCHEDULE_DELAY="100",
        QFARM_BUNDLE_SIZE="3",
    )
    farm.start_worker("cpu", queues="retrieve,verify")
    farm.start_worker("gpu", queues="generate")
    qfile = write_questions(tmp_path / "q.txt", QUESTIONS[:4])
    env = {**farm.env, "QFARM_OTEL": "1"}
    out = farm.qfarm(
        "sweep", str(qfile), "--modes", "quote,claim_lattice", "-n", "2", "--quiet", env=env
    )
    assert out.returncode == ExitCode.OK, out.stderr
    run_id = run_id_from(out.stderr)
    rows = [
        json.loads(line)
        for line in (Path(farm.env["QFARM_RESULTS_DIR"]) / run_id / "rows.jsonl")
        .read_text()
        .splitlines()
    ]
    assert len(rows) == 16
    assert farm.wait_for(
        lambda: sum(s["name"] == "qfarm.job" for s in receiver.spans) >= 16, timeout_s=30
    )
    time.sleep(0.5)  # the stages' last batches
    with receiver.lock:
        spans = list(receiver.spans)
    runs = [s for s in spans if s["name"] == "qfarm.run"]
    assert [(s["trace_id"], s["span_id"], s["service"]) for s in runs] == [
        (*run_span_ids(run_id), "qfarm")
    ]
    jobs = [s for s in spans if s["name"] != "qfarm.run"]
    assert {s["service"] for s in jobs} == {"qfarm-worker"}
    check_job_traces(jobs, rows, run_id)
    # Each queue's worker process sent its own stages' spans.
    pids = {name: {s["pid"] for s in jobs if s["name"] == name} for name in STAGES}
    assert len(pids["generate"]) == 1 and pids["retrieve"] == pids["verify"] != pids["generate"]
