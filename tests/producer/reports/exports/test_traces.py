"""Each job of a run as an OpenTelemetry trace (the SDK's in-memory exporter): one root per
job, one span per stage placed by the row's timings, linked to the run's trace; sampling."""

from __future__ import annotations

import json
import time

import pytest

from bench.perf.viewer import write_synthetic_run
from qfarm.common.errors import InputError, ServiceError
from qfarm.producer.reports.exports import read_exports
from qfarm.producer.reports.exports.traces import (
    default_ratio,
    export_traces,
    is_sampled,
    stage_windows,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(sweep):
    return sweep(n=1)


def spans_of(run_dir, export_extra, **options):
    memory = export_extra("opentelemetry.sdk.trace.export.in_memory_span_exporter")
    exporter = memory.InMemorySpanExporter()
    entry = export_traces(run_dir, span_exporter=exporter, **options)
    return entry, exporter.get_finished_spans()


def test_each_job_is_a_trace_with_a_span_per_stage(run, export_extra) -> None:
    entry, spans = spans_of(run.run_dir, export_extra)
    rows = {r["job_id"]: r for r in map(json.loads, run.rows_path.read_text().splitlines())}
    [run_span] = [s for s in spans if s.name == "qfarm.run"]
    roots = {s.attributes["qfarm.job_id"]: s for s in spans if s.name == "qfarm.job"}
    assert set(roots) == set(rows) and entry["jobs_traced"] == len(rows)
    assert len({s.context.trace_id for s in roots.values()} | {run_span.context.trace_id}) \
        == len(rows) + 1  # a trace per job, and the run's
    for job_id, root in roots.items():
        row = rows[job_id]
        assert root.parent is None
        assert [link.context.span_id for link in root.links] == [run_span.context.span_id]
        children = {s.name: s for s in spans if s.parent is not None
                    and s.parent.span_id == root.context.span_id}
        assert set(children) == {"retrieve", "generate", "verify"}
        for child in children.values():
            assert child.context.trace_id == root.context.trace_id
            assert root.start_time <= child.start_time <= child.end_time <= root.end_time
        generate = children["generate"]
        assert generate.attributes["qfarm.endpoint"] == row["endpoint"]
        assert generate.attributes["gen_ai.usage.input_tokens"] == row["usage"]["prompt_tokens"]
        assert generate.attributes["gen_ai.usage.output_tokens"] == row["usage"]["completion_tokens"]
        assert generate.attributes["qfarm.attempts"] == row["attempts"]
        assert (generate.end_time - generate.start_time) == pytest.approx(
            row["timings"]["llm_ms"] * 1e6, rel=1e-3)
        assert children["verify"].attributes["qfarm.verdict"] == row["verdict"]
    assert read_exports(run.run_dir)[-1] == entry


def test_sampling_traces_the_same_share_of_jobs_on_every_export(run, export_extra) -> None:
    _, none = spans_of(run.run_dir, export_extra, sample_ratio=0.0)
    assert [s.name for s in none] == ["qfarm.run"]
    first, half = spans_of(run.run_dir, export_extra, sample_ratio=0.5)
    _, again = spans_of(run.run_dir, export_extra, sample_ratio=0.5)
    chosen = {s.attributes["qfarm.job_id"] for s in half if s.name == "qfarm.job"}
    assert chosen == {s.attributes["qfarm.job_id"] for s in again if s.name == "qfarm.job"}
    assert 0 < len(chosen) < run.manifest.n_jobs == first["rows"]
    with pytest.raises(InputError, match="from 0 to 1"):
        spans_of(run.run_dir, export_extra, sample_ratio=1.5)


def test_a_million_job_run_traces_about_a_thousand_jobs_by_default() -> None:
    ratio = default_ratio(1_000_000)
    traced = sum(is_sampled(f"job-{i}", ratio) for i in range(200_000))
    assert default_ratio(1_000) == 1.0
    assert 150 <= traced <= 250  # 200,000 jobs at 1/1000: about 200


def test_spans_the_exporter_could_not_send_fail_the_export(run, export_extra) -> None:
    export = export_extra("opentelemetry.sdk.trace.export")

    class Refusing(export.SpanExporter):
        def export(self, spans):
            return export.SpanExportResult.FAILURE

    before = read_exports(run.run_dir)
    with pytest.raises(ServiceError, match="could not send 1 span batch"):
        export_traces(run.run_dir, span_exporter=Refusing())
    assert read_exports(run.run_dir) == before


def test_no_span_is_dropped_however_slow_the_collector(tmp_path, export_extra) -> None:
    memory = export_extra("opentelemetry.sdk.trace.export.in_memory_span_exporter")

    class SlowCollector(memory.InMemorySpanExporter):
        def export(self, spans):
            time.sleep(0.05)  # a collector that takes its time over each batch
            return super().export(spans)

    write_synthetic_run(tmp_path, "big", 500)  # 3,000 jobs: beyond the SDK's span queue
    exporter = SlowCollector()
    entry = export_traces(tmp_path / "big", span_exporter=exporter, sample_ratio=1.0)
    spans = exporter.get_finished_spans()
    assert len([s for s in spans if s.name == "qfarm.job"]) == entry["jobs_traced"] == 3000
    assert len(spans) == 1 + sum(len(stage_windows(json.loads(line))) for line in
                                 (tmp_path / "big" / "rows.jsonl").read_text().splitlines())
