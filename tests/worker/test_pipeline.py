"""A job through every stage (``flow.handle_job``, the one path that runs a job whole)
against the real simulator over HTTP and the real index; rows land in an in-memory Redis."""

from __future__ import annotations

import fakeredis
import pytest

from qfarm.common import keys
from qfarm.common.jobs import expand_jobs, ref_for
from qfarm.common.models import Evidence, Job, Mode, Preflight, Question, Retrieval, Row, Verdict
from qfarm.common.policy import build_policy
from qfarm.common.settings import Settings
from qfarm.producer.runs.sweep import make_manifest
from qfarm.worker import flow
from qfarm.worker.services import Services
from qfarm.worker.store import WorkerStore

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sim():
    from qfarm.ops.sim.launch import start_simulator

    with start_simulator(latency="zero") as handle:
        yield handle


@pytest.fixture(scope="module")
def retriever(default_index):
    from qfarm.worker.retrieval import open_retriever

    r = open_retriever(Settings(index_path=default_index))
    yield r
    r.close()


@pytest.fixture
def gateway(sim):
    from qfarm.worker.llm import open_gateway

    gw = open_gateway(Settings(llm_endpoints=sim.url, llm_max_attempts=1))
    yield gw
    gw.close()


def make_job(text: str, mode: Mode = Mode.CLAIM_LATTICE_POINTER, **policy):
    q = Question(id="q1", text=text)
    return next(iter(expand_jobs("run-t", [q], [mode], 1, build_policy(policy), model="m")))


def run_job(job: Job, retriever, gateway) -> Row:
    """Run ``job`` as the interactive task does and return its row."""
    store = WorkerStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()))
    manifest = make_manifest(
        run_id=job.run_id, question_file="-", question_file_digest="-", n_questions=1,
        modes=[job.mode], n=1, policy=job.policy, model=job.model, endpoints=[], simulated=True,
        retriever="embedded", index_version=None, corpus=None, eager=True, use_cache=False,
    )
    store.client.set(keys.manifest_key(job.run_id), manifest.model_dump_json())
    svc = Services(settings=Settings(), store=store, worker_name="t",
                   retriever_factory=lambda: retriever, gateway_factory=lambda: gateway)
    flow.handle_job(ref_for(job).model_dump(mode="json", exclude_none=True), svc)
    return Row.model_validate_json(store.client.hget(keys.rows_key(job.run_id), job.job_id))


def completions_seen(sim) -> int:
    return sum(1 for r in sim.stats()["requests"] if "completions" in r["path"])


def test_a_job_runs_every_stage_and_fills_its_row(sim, retriever, gateway):
    row = run_job(make_job("Who were all the members of the Beatles?"), retriever, gateway)
    assert row.error is None
    assert row.grading is not None and row.grading.verdict in set(Verdict)
    assert row.evidence_ids[0] == "E1" and "The Beatles" in row.top_doc_titles[:3]
    assert row.endpoint == sim.url and row.simulated is True
    assert row.usage.completion_tokens and row.usage.prompt_tokens
    assert row.timings.retrieval_ms is not None and row.timings.llm_ms is not None
    assert row.timings.verify_ms is not None and row.timings.total_ms is not None
    assert row.quantifier_intensity == "ALL" and row.answer is None


def test_reject_broad_decides_before_retrieval_and_sends_no_model_request(sim, retriever, gateway):
    sim.reset()
    job = make_job("Tell me everything you know about volcanoes.", quantifier_reject_broad=True)
    row = run_job(job, retriever, gateway)
    assert row.grading is not None
    assert row.grading.verdict is Verdict.UNGROUNDED and row.grading.label.value == "BROAD-REJECTED"
    assert row.model_dump(mode="json")["violation_kinds"] == ["BROAD_QUANTIFIER_REJECTED"]
    assert row.answerability is None and row.evidence_ids == []
    assert completions_seen(sim) == 0


def test_a_bounded_universal_is_not_rejected(sim, retriever, gateway):
    sim.reset()
    job = make_job("Who were all the members of the Beatles?", quantifier_reject_broad=True)
    row = run_job(job, retriever, gateway)
    assert "BROAD_QUANTIFIER_REJECTED" not in row.model_dump(mode="json")["violation_kinds"]
    assert completions_seen(sim) == 1


def test_an_unreachable_endpoint_becomes_a_row_with_its_error(retriever):
    from qfarm.worker.llm import open_gateway

    gw = open_gateway(Settings(llm_endpoints="http://127.0.0.1:9", llm_max_attempts=2,
                               llm_connect_timeout_s=0.5, llm_wait_for_endpoint_s=1.0))
    try:
        row = run_job(make_job("What is jazz?"), retriever, gw)
    finally:
        gw.close()
    assert row.error and row.error.startswith("llm:")
    assert row.grading is None and row.attempts >= 1


@pytest.mark.parametrize("answer", ["", "   \n", '{"claims": [', "no format at all " * 50])
def test_empty_truncated_or_unformatted_replies_are_rows_not_exceptions(retriever, answer):
    from qfarm.common.models import Generation

    class Canned:
        def generate_many(self, items):
            return [Generation(text=answer, endpoint="canned") for _ in items]

    for mode in Mode:
        row = run_job(make_job("What is jazz?", mode=mode), retriever, Canned())
        assert row.error is None and row.grading is not None


def test_streaming_records_time_to_first_token_in_the_row(sim, retriever):
    from qfarm.worker.llm import open_gateway

    gw = open_gateway(Settings(llm_endpoints=sim.url, llm_stream=True))
    try:
        row = run_job(make_job("What is jazz?"), retriever, gw)
    finally:
        gw.close()
    assert row.error is None
    assert row.timings.ttft_ms is not None and row.timings.ttft_ms <= row.timings.llm_ms


def test_the_samples_of_a_question_share_one_preflight_and_a_new_policy_gets_its_own():
    from qfarm.worker import pipeline

    text = "Tell me everything you know about volcanoes."
    q = Question(id="q1", text=text)
    a, b = expand_jobs("run-p", [q], [Mode.CLAIM_LATTICE_POINTER], 2, build_policy({}), model="m")
    first = pipeline.preflight_stage(pipeline.begin(a))
    assert pipeline.preflight_stage(pipeline.begin(b)).preflight is first.preflight
    assert not first.preflight.rejected and first.verification is None
    # The same question under reject-broad is decided differently, not served the memo's copy.
    rejecting = make_job(text, quantifier_reject_broad=True)
    decided = pipeline.preflight_stage(pipeline.begin(rejecting))
    assert decided.preflight.rejected and decided.verification is not None


def test_a_cancelled_run_abandons_its_bundles_unanswered_requests(retriever):
    from qfarm.ops.sim.launch import start_simulator
    from qfarm.worker import pipeline
    from qfarm.worker.llm import open_gateway

    qs = [Question(id=f"q{i}", text=t) for i, t in enumerate(
        ["Who wrote Hamlet?", "What is DNA?", "What is jazz?"])]
    jobs = list(expand_jobs("run-c", qs, [Mode.QUOTE, Mode.CLAIM_LATTICE], 1, build_policy({}),
                            model="m"))
    records = pipeline.retrieval_stage(
        [pipeline.preflight_stage(pipeline.begin(j)) for j in jobs], retriever)
    checks: list[list[str]] = []

    def cancelled_runs(runs):  # cancelled from the second look on
        checks.append(list(runs))
        return set(runs) if len(checks) >= 2 else set()

    # One request at a time, ~0.3 s each: by the second check (~1 s) most of the six wait.
    with start_simulator(ttft_ms=300, tpot_ms=0, max_num_seqs=1) as slow:
        gw = open_gateway(Settings(llm_endpoints=slow.url, llm_max_attempts=1,
                                   llm_max_inflight_per_endpoint=1))
        try:
            out = pipeline.generation_stage(records, gw, cancelled_runs=cancelled_runs)
        finally:
            gw.close()
        sent = sum(1 for r in slow.stats()["requests"] if "completions" in r["path"])
    answered = [r for r in out if r.error is None]
    stopped = [r for r in out if r.error_kind == "cancelled"]
    assert checks[0] == ["run-c"] and len(answered) + len(stopped) == 6
    assert answered and stopped  # stopped between the jobs of the bundle
    assert sent < 6  # abandoned requests waiting for the endpoint were never sent
    # Each answered job's LLM time is its own request's, and its total its own stages'.
    rows = [pipeline.finish(pipeline.verification_stage(r)) for r in answered]
    assert len({r.timings.llm_ms for r in rows}) == len(rows)
    for row in rows:
        t = row.timings
        assert t.total_ms == pytest.approx(t.retrieval_ms + t.llm_ms + t.verify_ms, abs=0.01)


def test_a_batched_search_is_shared_among_its_questions():
    import time

    from qfarm.worker import pipeline

    class Searcher:
        backend = "fake"
        took = 0.0

        def search_many(self, texts, *, top_k, title_boost):
            t0 = time.perf_counter()
            time.sleep(0.05 * len(texts))
            self.took = (time.perf_counter() - t0) * 1000.0
            return [[] for _ in texts]

        def index_version(self):
            return "v"

    qs = [Question(id=f"q{i}", text=f"What is topic {i}?") for i in range(4)]
    jobs = list(expand_jobs("run-r", qs, [Mode.QUOTE], 2, build_policy({}), model="m"))
    searcher = Searcher()
    out = pipeline.retrieval_stage([pipeline.begin(j) for j in jobs], searcher)  # type: ignore[arg-type]
    # Four questions searched in one batch: each job carries a quarter of it (plus its
    # own evidence fitting), not the whole batch's time.
    for r in out:
        assert searcher.took / 4 <= r.timings.retrieval_ms < searcher.took


def test_the_preflight_reads_the_index_titles_as_names(retriever):
    from qfarm.worker import pipeline

    job = make_job("what causes multiple sclerosis?", quantifier_reject_broad=True)
    svc = Services(settings=Settings(), store=None, worker_name="w",  # type: ignore[arg-type]
                   retriever_factory=lambda: retriever)
    titles = flow._titles(svc)
    assert titles is not None and titles == retriever.title_set()
    without = pipeline.preflight_stage(pipeline.begin(job)).preflight
    named = pipeline.preflight_stage(pipeline.begin(job), titles).preflight
    assert without.quantifier.intensity.value == "MANY"  # "multiple" read as a quantifier
    assert named.quantifier.intensity.value == "SINGULAR"


def test_a_runs_manifest_carries_the_plans_preflight_hash_with_the_index_titles(retriever):
    from qfarm.common.grounding.preflight import plan_preflight_hash
    from qfarm.producer.runs.services import run_manifest
    from qfarm.producer.runs.types import Endpoints, QuestionSet, SweepSpec

    questions = QuestionSet.from_texts(["what causes multiple sclerosis?"])
    man = run_manifest(SweepSpec(questions), questions, [Mode.QUOTE], Settings(),
                       Endpoints(urls=[], simulated=True), retriever, eager=True)  # fmt: skip
    titles = retriever.title_set()
    profile = man.model_profile_id
    assert man.preflight_hash == plan_preflight_hash(["what causes multiple sclerosis?"],
                                                     profile, titles)  # fmt: skip
    assert man.preflight_hash != plan_preflight_hash(["what causes multiple sclerosis?"], profile)


@pytest.mark.parametrize("mode", list(Mode))
def test_structured_output_sends_the_jobs_grammar_and_rows_cite(sim, retriever, gateway, mode):
    """Under the default (small-model) profile a quarter of free answers collapse or carry
    prose; with structured_output each job's request carries its grammar (the prompt's
    ids, the claim cap) and the simulator writes only what it admits."""
    from qfarm.common.grounding.grammars import answer_grammar
    from qfarm.common.models import JobRecord
    from qfarm.worker.pipeline import sampling_for

    job = make_job("Who were all the members of the Beatles?", mode, structured_output=True,
                   quantifier_guard_apply_caps=True)
    ev = (Evidence(id="E1", doc_id="d", chunk_id="d#0", title="t", text="x", score=1.0,
                   offset_start=0, offset_end=1),)  # fmt: skip
    record = JobRecord(job=job, retrieval=Retrieval(evidence=ev),
                       preflight=Preflight(claim_cap=8, cap_enforced=True))  # fmt: skip
    assert sampling_for(record).grammar == answer_grammar(mode, ["E1"], max_claims=8,
                                                          max_ids_per_claim=3)
    assert sampling_for(record.model_copy(update={"job": make_job("q", mode)})).grammar is None
    q = Question(id="q1", text="Who were all the members of the Beatles?")
    for sample in expand_jobs("run-t", [q], [mode], 6, job.policy, model="m"):
        row = run_job(sample, retriever, gateway)
        assert row.error is None
        assert row.grading is not None
        assert not row.grading.format_collapsed and row.grading.answer_pointer_count >= 1, row


def test_each_stage_copies_a_record_once(monkeypatch):
    """A stage that adds its part and its timing makes one copy of the record, not one per
    part (the copies were a share of every job's CPU); what it adds is unchanged."""
    from qfarm.common.models import Generation, JobRecord
    from qfarm.worker import pipeline

    text = "Jazz is a music genre that originated in New Orleans in the late 19th century."
    evidence = (Evidence(id="E1", doc_id="d", chunk_id="d#0", title="Jazz", text=text, score=1.0,
                         offset_start=0, offset_end=len(text)),)  # fmt: skip
    job = make_job("What is jazz?", Mode.QUOTE).model_copy(
        update={"question": Question(id="q1", text="What is jazz?", answers=("New Orleans",))})
    record = pipeline.preflight_stage(pipeline.begin(job))
    copies: list[str] = []
    real = JobRecord.model_copy

    def counted(self, *args, **kwargs):
        copies.append("copy")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(JobRecord, "model_copy", counted)
    record = pipeline._fit_evidence(record, evidence, "embedded", "v", 1.5)
    assert len(copies) == 1 and record.retrieval is not None and record.timings.retrieval_ms
    answer = Generation(text=f'"{text}" [E1]', endpoint="e", llm_ms=3.0)
    record = pipeline.with_generation(record, answer, 0.0)
    assert len(copies) == 2 and record.timings.llm_ms == 3.0
    record = pipeline.verification_stage(record)
    assert len(copies) == 3 and record.timings.verify_ms is not None
    assert record.verification.gold_in_claims and record.verification.gold_in_evidence
    row = pipeline.finish(record)
    assert len(copies) == 4 and row.timings.total_ms is not None and row.finished_at


def test_the_gateways_lines_about_a_bundle_name_its_run(retriever):
    """A worker serves several runs through one gateway: its lines about a bundle's
    requests (a failed attempt, logged on the gateway's own thread) name the bundle's run."""
    import io
    import json
    import logging

    from qfarm.common import logs
    from qfarm.ops.sim.launch import start_simulator
    from qfarm.worker import pipeline
    from qfarm.worker.llm import open_gateway

    stream = io.StringIO()
    handler = logs.log_handler(stream, fmt="json")
    logger = logging.getLogger("qfarm")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        with start_simulator(latency="zero") as sim:
            gw = open_gateway(Settings(llm_endpoints=sim.url, llm_max_attempts=3,
                                       llm_backoff_base_s=0.01, llm_backoff_max_s=0.02))
            try:
                for run_id in ("run-a", "run-b"):
                    (job,) = expand_jobs(run_id, [Question(id="q1", text="What is jazz?")],
                                         [Mode.QUOTE], 1, build_policy({}), model="m")
                    records = pipeline.retrieval_stage(
                        [pipeline.preflight_stage(pipeline.begin(job))], retriever)
                    sim.set_faults(next=["503"])
                    (out,) = pipeline.generation_stage(records, gw)
                    assert out.error is None and out.generation.attempts == 2
            finally:
                gw.close()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    failed = [json.loads(x) for x in stream.getvalue().splitlines() if "attempt 1 failed" in x]
    assert sorted(r.get("run_id") for r in failed) == ["run-a", "run-b"], failed
