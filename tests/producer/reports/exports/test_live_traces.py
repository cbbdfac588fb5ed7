"""Live traces of a distributed sweep (docs/reports.md, 'Exports'): real Celery workers on
the test's Redis database, each sampled job one trace whose stage spans come from the
workers that ran them.

Three ways: a worker in this process (Celery's ``start_worker``) with the SDK's in-memory
exporter; real ``celery worker`` processes, split by queue, sending OTLP/HTTP to a receiver
this test runs (it decodes the exporter's protobuf with opentelemetry-proto, which the
exporter depends on); and the same processes sending to the OpenTelemetry Collector itself.
The collector is Go source from the Go module proxy, compiled by `make otelcol`
(ops/scripts/ensure-otelcol.sh, part of `make install-test`); its test skips where that
binary is missing, and fails instead under `make test` (QFARM_REQUIRE_OTELCOL=1)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import redis

from qfarm.common.models import Mode
from qfarm.common.traces import job_span_ids, run_span_ids
from qfarm.common.vocab import ExitCode
from tests.producer.conftest import VENV_BIN, Farm
from tests.producer.runs.test_distributed import QUESTIONS, run_id_from, write_questions

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
    from qfarm.producer.reports.exports.traces import export_traces
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


def run_traced_sweep(farm: Farm, endpoint: str, tmp_path: Path) -> tuple[str, list[dict]]:
    """``qfarm sweep`` with QFARM_OTEL=1 sending to ``endpoint``: the retrieve and verify
    worker and the generate worker are two processes, each sending its stages' spans; the
    sweep sends the run's. Returns the run id and its 16 rows."""
    farm.env.update(
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
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
    return run_id, rows


def check_sweep_traces(spans: list[dict], rows: list[dict], run_id: str) -> None:
    """The run's span from the sweep, one trace per job from the workers, and each queue's
    worker process sending its own stages' spans."""
    runs = [s for s in spans if s["name"] == "qfarm.run"]
    assert [(s["trace_id"], s["span_id"], s["service"]) for s in runs] == [
        (*run_span_ids(run_id), "qfarm")
    ]
    jobs = [s for s in spans if s["name"] != "qfarm.run"]
    assert {s["service"] for s in jobs} == {"qfarm-worker"}
    check_job_traces(jobs, rows, run_id)
    pids = {name: {s["pid"] for s in jobs if s["name"] == name} for name in STAGES}
    assert len(pids["generate"]) == 1 and pids["retrieve"] == pids["verify"] != pids["generate"]


def test_worker_processes_split_by_queue_send_one_trace_per_job(farm, receiver, tmp_path):
    run_id, rows = run_traced_sweep(farm, f"http://127.0.0.1:{receiver.server_port}", tmp_path)
    assert farm.wait_for(
        lambda: sum(s["name"] == "qfarm.job" for s in receiver.spans) >= 16, timeout_s=30
    )
    time.sleep(0.5)  # the stages' last batches
    with receiver.lock:
        spans = list(receiver.spans)
    check_sweep_traces(spans, rows, run_id)


# The collector `make otelcol` (and so `make install-test`) builds: ops/otelcol.
OTELCOL = VENV_BIN / "qfarm-otelcol"
# The receiver on the test's port; the debug exporter writing each batch's spans, detailed,
# to a file of its own rather than the collector's log (use_internal_logger: false), with no
# sampling of its log entries; the collector's own metrics off, as their default is a server
# on a fixed port that two collectors (or anything else there) would fight over.
OTELCOL_CONFIG = """\
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{port}
exporters:
  debug:
    verbosity: detailed
    use_internal_logger: false
    output_paths: [{output}]
    sampling_initial: 1000000
    sampling_thereafter: 1
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [debug]
"""


@dataclass
class Collector:
    port: int
    output: Path
    log: Path


@pytest.fixture(scope="session")
def otelcol_binary() -> Path:
    """The collector's binary. Skips where `make otelcol` has not built it;
    QFARM_REQUIRE_OTELCOL=1 (`make test`) fails instead. Session-scoped, as the suite's
    other such checks are, so that it reads the variable before each test's clean
    environment (tests/conftest.py) removes it."""
    if not OTELCOL.exists():
        reason = f"{OTELCOL.name} is not built (`make otelcol` builds it)"
        if os.environ.get("QFARM_REQUIRE_OTELCOL") == "1":
            pytest.fail(f"QFARM_REQUIRE_OTELCOL=1 but {reason}")
        pytest.skip(reason)
    return OTELCOL


@pytest.fixture
def collector(otelcol_binary: Path, unused_port: int, tmp_path: Path) -> Iterator[Collector]:
    """The OpenTelemetry Collector on a free port, started from a config of this test's."""
    col = Collector(unused_port, tmp_path / "otelcol-traces.txt", tmp_path / "otelcol.log")
    config = tmp_path / "otelcol.yaml"
    config.write_text(OTELCOL_CONFIG.format(port=col.port, output=json.dumps(str(col.output))))
    with col.log.open("wb") as log:
        proc = subprocess.Popen(
            [str(otelcol_binary), "--config", f"file:{config}"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        assert Farm.wait_for(
            lambda: proc.poll() is not None or _listening(col.port), timeout_s=60
        ), "the collector did not start listening"
        assert proc.poll() is None, col.log.read_text()
        yield col
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


# The debug exporter's detailed text (exporter/debugexporter/internal/otlptext in the
# collector's source): a span's fields are "    Name           : value" lines, attributes
# "     -> key: Type(value)" lines under a "Resource attributes:" or "Attributes:" heading, and
# a link's ids "     -> Trace ID: ..." lines under "SpanLink #i".
_FIELD = re.compile(r"^    (Trace ID|Parent ID|ID|Name|Start time|End time)\s*: ?(.*)$")
_ARROW = re.compile(r"^\s+-> ([^:]+): (.*)$")
_TYPED = re.compile(r"^(\w+)\((.*)\)$", re.S)


def _typed(text: str) -> object:
    """``Int(3)``, ``Str(x)``, ``Bool(true)``, ``Double(0.5)``, ``Slice([...])``."""
    match = _TYPED.match(text)
    if not match:
        return text
    kind, value = match.groups()
    if kind == "Int":
        return int(value)
    if kind == "Double":
        return float(value)
    if kind == "Bool":
        return value == "true"
    if kind in ("Slice", "Map"):
        return json.loads(value)
    return value


def _nanos(text: str) -> int:
    """Go's time.Time text, ``2026-12-07 15:20:01.0123 +0000 UTC`` (trailing zeros of the
    fraction dropped), as Unix nanoseconds."""
    date, clock, offset = text.split()[:3]
    whole, _, fraction = clock.partition(".")
    seconds = datetime.strptime(f"{date} {whole} {offset}", "%Y-%m-%d %H:%M:%S %z").timestamp()
    return int(seconds) * 1_000_000_000 + int((fraction or "0").ljust(9, "0"))


def _hex_id(text: str) -> int | None:
    return int(text, 16) if text.strip() else None


def _set_field(span: dict, key: str, value: str) -> None:
    """One of a span's "    Key : value" lines."""
    if key in ("Trace ID", "Parent ID", "ID"):
        span[{"Trace ID": "trace_id", "Parent ID": "parent", "ID": "span_id"}[key]] = _hex_id(value)
    elif key == "Name":
        span["name"] = value
    else:
        span["start" if key == "Start time" else "end"] = _nanos(value)


def _heading(line: str, span: dict | None) -> str | None:
    """The section a heading line opens (where the "     -> " lines after it belong)."""
    if line.startswith("ResourceSpans #") or line == "Resource attributes:":
        return "resource"
    if line.startswith("ScopeSpans #"):
        return ""
    if span is not None and line in ("Attributes:", "Events:", "Links:"):
        return line[:-1].lower()
    return None


def parse_debug_spans(text: str) -> list[dict]:
    """The spans of the debug exporter's detailed output, as ``sdk_span`` gives them, with
    their resource's service name and process id."""
    spans: list[dict] = []
    resource: dict[str, object] = {}
    span: dict | None = None
    section = ""
    for line in text.splitlines():
        if (heading := _heading(line, span)) is not None:
            if line.startswith(("ResourceSpans #", "ScopeSpans #")):
                span = None
            if line.startswith("ResourceSpans #"):
                resource = {}
            section = heading
        elif re.fullmatch(r"Span #\d+", line):
            span = {"service": resource.get("service.name"), "pid": resource.get("process.pid")}
            span.update(parent=None, links=[], attributes={})
            spans.append(span)
            section = "span"
        elif span is not None and line.startswith("SpanLink #"):
            span["links"].append([None, None])
            section = "link"
        elif span is not None and section == "span" and (field := _FIELD.match(line)):
            _set_field(span, field.group(1), field.group(2).strip())
        elif arrow := _ARROW.match(line):
            key, value = arrow.groups()
            if section == "resource":
                resource[key] = _typed(value)
            elif section == "attributes" and span is not None:
                span["attributes"][key] = _typed(value)
            elif section == "link" and span is not None and key in ("Trace ID", "ID"):
                span["links"][-1][key == "ID"] = _hex_id(value)
    for span in spans:
        span["links"] = [tuple(link) for link in span["links"]]
    return spans


def test_worker_processes_send_one_trace_per_job_to_the_opentelemetry_collector(
    farm, collector, tmp_path
):
    """The same sweep sending to the OpenTelemetry Collector (core, v0.165.0, built from
    ops/otelcol), read back from its debug exporter's detailed output."""
    run_id, rows = run_traced_sweep(farm, f"http://127.0.0.1:{collector.port}", tmp_path)

    def spans() -> list[dict]:
        if not collector.output.exists():
            return []
        return parse_debug_spans(collector.output.read_text())

    assert farm.wait_for(
        lambda: sum(s["name"] == "qfarm.job" for s in spans()) >= 16, timeout_s=30
    ), collector.log.read_text()[-2000:]
    time.sleep(0.5)  # the stages' last batches
    check_sweep_traces(spans(), rows, run_id)


def test_the_debug_exporter_text_parses_to_spans() -> None:
    """The parser on the exporter's format as its own test data shows it (a link, an empty
    parent, a fraction of a second with its trailing zeros dropped), without the collector."""
    text = """Traces\t{"resource spans": 1, "spans": 1}
ResourceSpans #0
Resource SchemaURL:
Resource attributes:
     -> service.name: Str(qfarm-worker)
     -> process.pid: Int(7)
ScopeSpans #0
ScopeSpans SchemaURL:
InstrumentationScope qfarm.worker
Span #0
    Trace ID       : 0102030405060708090a0b0c0d0e0f10
    Parent ID      :
    ID             : 1112131415161718
    Name           : qfarm.job
    Kind           : Internal
    Start time     : 2020-02-11 20:26:12.0003 +0000 UTC
    End time       : 2020-02-11 20:26:13 +0000 UTC
    Status code    : Unset
    Status message :
    DroppedAttributesCount: 0
    DroppedEventsCount: 0
    DroppedLinksCount: 0
Attributes:
     -> qfarm.job_id: Str(j-1)
     -> qfarm.attempts: Int(2)
     -> qfarm.cache_hit: Bool(false)
Links:
SpanLink #0
     -> Trace ID: 0a000000000000000000000000000001
     -> ID: 0b00000000000001
     -> TraceState:
     -> DroppedAttributesCount: 0
"""
    (span,) = parse_debug_spans(text)
    assert span == {
        "service": "qfarm-worker",
        "pid": 7,
        "name": "qfarm.job",
        "trace_id": 0x0102030405060708090A0B0C0D0E0F10,
        "span_id": 0x1112131415161718,
        "parent": None,
        "links": [(0x0A000000000000000000000000000001, 0x0B00000000000001)],
        "attributes": {"qfarm.job_id": "j-1", "qfarm.attempts": 2, "qfarm.cache_hit": False},
        "start": 1581452772_000300000,
        "end": 1581452773_000000000,
    }
