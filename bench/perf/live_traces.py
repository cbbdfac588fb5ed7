"""What live tracing costs a worker per job: the stage and job span hooks of
``qfarm.worker.tracing`` over a bundle's finished records, with tracing off (an untraced
run: no job carries a ``traceparent``) and on (every job sampled, spans handed to the
SDK's batch processor as a worker does, the exporter a no-op so the network is not timed),
and the bytes the ``traceparent`` adds to each job's record in a stage's message.

    .venv/bin/python -m bench.perf.live_traces [--jobs 20000] [--quick]

Needs the ``otel`` extra (``make install-test``). Prints ``live_traces_us_per_job_off=``
and ``live_traces_us_per_job_on=`` (the hooks of the three stages and the row write).
"""

from __future__ import annotations

import argparse
import time

from qfarm.common.jobs import expand_jobs, job_from_ref, ref_for
from qfarm.common.models import (
    Evidence,
    Generation,
    JobRecord,
    LlmRequest,
    Manifest,
    Mode,
    Question,
    Retrieval,
    Timings,
    Usage,
    Verification,
)
from qfarm.common.policy import Policy
from qfarm.producer.runs.sweep import make_manifest
from qfarm.worker import encoding, pipeline, tracing

STAGES = ("retrieve", "generate", "verify")


def records(n: int, traces: float | None) -> tuple[list[JobRecord], Manifest]:
    """``n`` finished records of one run, as the verify stage holds them."""
    run_id = "bench-on" if traces else "bench-off"
    manifest = make_manifest(
        run_id=run_id,
        question_file="-",
        question_file_digest="-",
        n_questions=n,
        modes=[Mode.QUOTE],
        n=1,
        policy=Policy(),
        model="m",
        retriever="embedded",
        eager=False,
        traces=traces,
    )
    questions = [Question(id=f"q{i}", text=f"What is thing {i}?") for i in range(n)]
    now = time.time()
    evidence = tuple(
        Evidence(
            id=f"E{k}",
            doc_id=f"d{k}",
            chunk_id=f"c{k}",
            title="T",
            text="x" * 300,
            score=1.0,
            offset_start=0,
            offset_end=300,
        )
        for k in range(1, 6)
    )
    out = []
    for job in expand_jobs(run_id, questions, [Mode.QUOTE], 1, Policy(), model="m"):
        job = job_from_ref(ref_for(job), manifest)
        out.append(
            JobRecord(
                job=job,
                started_at=now,
                finished_at=now + 0.5,
                worker="w",
                retrieval=Retrieval(evidence=evidence, retrieval_ms=3.0),
                generation=Generation(
                    text='"x" [E1]',
                    endpoint="http://gpu1:8000",
                    attempts=1,
                    usage=Usage(prompt_tokens=900, completion_tokens=40),
                    request=LlmRequest(sent_at=now + 0.01, ms=400.0),
                ),
                verification=Verification(),
                timings=Timings(retrieval_ms=3.0, llm_ms=400.0, verify_ms=2.0),
            )
        )
    return out, manifest


def hooks_us_per_job(recs: list[JobRecord], manifest: Manifest, bundle: int = 32) -> float:
    """The four hooks a job meets (three stage steps, one row write), per job."""
    rows = [pipeline.finish(r) for r in recs]
    jsons = [row.model_dump_json() for row in rows]
    started = time.perf_counter()
    for i in range(0, len(recs), bundle):
        part = recs[i : i + bundle]
        for stage in STAGES:
            tracing.stage_spans(stage, part, 1.0, 2.0)
        tracing.job_spans(
            rows[i : i + bundle], jsons[i : i + bundle], [True] * len(part), lambda run_id: manifest
        )
    return (time.perf_counter() - started) / len(recs) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--quick", action="store_true", help="200 jobs: does it run")
    args = parser.parse_args()
    n = 200 if args.quick else args.jobs
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class Nowhere(SpanExporter):
        def export(self, spans):  # type: ignore[no-untyped-def]
            return SpanExportResult.SUCCESS

    off, off_manifest = records(n, None)
    on, on_manifest = records(n, 1.0)
    tracing.use_exporter(Nowhere(), batch=True)
    try:
        hooks_us_per_job(on[: min(n, 500)], on_manifest)  # warm: imports, the provider
        us_off = hooks_us_per_job(off, off_manifest)
        tracing.reset()
        tracing.use_exporter(Nowhere(), batch=True)
        us_on = hooks_us_per_job(on, on_manifest)
    finally:
        tracing.reset()
    added = (len(encoding.dump_records(on[:32])) - len(encoding.dump_records(off[:32]))) / 32
    print(f"jobs={n} (bundles of 32; spans to the SDK's batch processor, a no-op exporter)")
    print(f"live_traces_us_per_job_off={us_off:.2f}")
    print(f"live_traces_us_per_job_on={us_on:.1f}")
    print(f"live_traces_message_bytes_per_job={added:.0f}")


if __name__ == "__main__":
    main()
