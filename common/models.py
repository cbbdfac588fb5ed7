"""Records that flow through the pipeline and cross process boundaries.

One job record type (``JobRecord``) travels from the producer through every
worker stage to the aggregator; each stage returns a copy with its own part
filled in. Everything here is a frozen pydantic model serialized with
``model_dump(mode="json")`` (never pickle), carrying a ``schema_version``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from qfarm.common.policy import Policy, governance_policy_hash, verifier_policy_hash
from qfarm.common.profiles import profile_id_for_model
from qfarm.common.record import RunRecord
from qfarm.common.urls import redact_urls
from qfarm.common.versions import ROW_SCHEMA_VERSION
from qfarm.common.vocab import (
    ALL_MODES,
    Backend,
    Confidence,
    ErrorKind,
    Intensity,
    Label,
    Mode,
    Verdict,
    ViolationKind,
    error_text,
)

# The vocabulary is defined in qfarm.common.vocab; these records carry it, so importers
# of a record can take its words from here too.
__all__ = [
    "ALL_MODES", "Confidence", "ErrorKind", "Intensity", "Label", "Mode", "Verdict", "ViolationKind",
]


class Frozen(BaseModel):
    """Immutable, JSON-serializable base for everything that crosses a process."""

    model_config = ConfigDict(frozen=True, extra="forbid")


# --------------------------------------------------------------------------- inputs


class Question(Frozen):
    """One question from a question file (or the command line)."""

    id: str
    text: str
    answers: tuple[str, ...] | None = None
    source: str | None = None  # "file:line" it came from, for messages
    scope: Literal["bounded", "unbounded"] | None = None  # the file's word on a broad question's scope
    title: str | None = None  # the article that answers it, when the file names one


class Evidence(Frozen):
    """One retrieved passage, numbered E1..Ek in rank order (docs/grounding.md, 'Evidence map')."""

    id: str  # "E1"
    doc_id: str
    chunk_id: str
    title: str
    text: str
    score: float
    offset_start: int
    offset_end: int


class RunSettings(Frozen):
    """What every job of a run shares, stated once: the run's manifest holds it (a
    ``Manifest`` is one), each ``Job`` carries it, and ``run_settings`` copies it from the
    one to the other (``qfarm.common.jobs``)."""

    policy: Policy = Field(default_factory=Policy)
    model: str = "adamo1139/Hermes-3-Llama-3.1-8B-FP8-Dynamic"
    model_profile_id: str = "default"
    keep_answers: bool = False
    use_cache: bool = True
    # ``--cache``: model replies of this run may come from, and go into, the response cache
    # (docs/llm.md, 'Response cache'). Not a policy field: a reply served again is the same
    # reply, so the run's hashes (and the result cache's key) stay as they were.
    response_cache: bool = False

    def run_settings(self) -> dict[str, Any]:
        """These fields by name, for building a job of the run."""
        return {name: getattr(self, name) for name in RunSettings.model_fields}


class Job(RunSettings):
    """One (question, mode, sample index) of a run, as the producer sends it."""

    schema_version: int = 1
    run_id: str
    job_id: str
    question: Question
    mode: Mode
    sample_index: int = 0
    seed: int = 0
    enqueued_at: float | None = None  # epoch seconds, for queue_wait_ms
    # The error kinds of this job's earlier attempts, oldest first (``--retry-errors``);
    # its length is the attempt number, which the row write compares (common/keys.py).
    retried_errors: tuple[str, ...] = ()
    # W3C traceparent of the job's span when its run is traced live and the job sampled
    # (common/traces.py, ``job_traceparent``): each stage's span is its child, so it rides
    # with the job through every bundle and re-send. Left out of the JSON when None, so
    # an untraced job's messages carry no trace field.
    traceparent: str | None = Field(None, exclude_if=lambda value: value is None)

    @property
    def attempt(self) -> int:
        return len(self.retried_errors)


# --------------------------------------------------------------------------- stage outputs


class QuantifierInfo(Frozen):
    """Output of ``classify_question_quantifier`` (docs/grounding.md, 'Quantifier classifier')."""

    intensity: Intensity = Intensity.SINGULAR
    matched_token: str | None = None
    explicit_count: int | None = None
    is_broad: bool = False
    operational_shape: str = "one_fact"
    scope_bound_hint: str = "unknown"
    classifier_version: str = ""


class Preflight(Frozen):
    """Quantifier preflight decisions, made before retrieval.

    The rules: docs/grounding.md, 'Preflight, reject-broad, allow-broad'.
    """

    quantifier: QuantifierInfo = Field(default_factory=QuantifierInfo)
    guard_active: bool = False  # guard enabled and mode in quantifier_guard_modes
    claim_cap: int | None = None  # the guard's cap (None when the guard is off for this job)
    claim_cap_profile: int | None = None  # the profile table's cap for this rung, always reported
    cap_enforced: bool = False  # apply_caps on and the mode guarded: excess claims not admitted
    rejected: bool = False  # reject-broad fired: no retrieval, no model call
    reject_message: str | None = None
    exploratory: bool = False  # allow_broad on a broad question


class Retrieval(Frozen):
    evidence: tuple[Evidence, ...] = ()
    backend: str = Backend.EMBEDDED
    index_version: str | None = None
    retrieval_ms: float = 0.0


class Usage(Frozen):
    """Tokens a job's answer cost: the server's ``usage`` (a micro-batch's shared out in
    proportion to characters), or, when the server gave none, qfarm's estimate
    (``estimated``: characters / 4, docs/reports.md, 'What a run cost')."""

    prompt_tokens: int | None = Field(None, description="prompt tokens of the answering request (a micro-batch's apportioned; a shared-samples request's split among its choices)")
    completion_tokens: int | None = Field(None, description="completion tokens of the answer")
    estimated: bool = Field(False, description="true when the server gave no usage and tokens are characters / 4")


class LlmRequest(Frozen):
    """The HTTP request that answered a job: when it was sent (epoch seconds), how long it
    took, and how many prompts it carried (a micro-batch's are answered together)."""

    sent_at: float = Field(description="when the answering request was sent, epoch seconds")
    ms: float = Field(description="the whole request's duration, ms")
    prompts: int = Field(1, description="answers the request carried: a micro-batch's prompts, or a shared-samples request's n choices")


class Generation(Frozen):
    """What the LLM gateway returns for one prompt."""

    text: str
    finish_reason: str | None = None
    endpoint: str | None = None
    attempts: int = 1
    usage: Usage = Field(default_factory=Usage)
    request: LlmRequest | None = None  # None: no request answered (a failure)
    llm_ms: float = 0.0
    ttft_ms: float | None = None
    simulated: bool = False
    # what the endpoint said it is when it is not vLLM (e.g. "llama.cpp server
    # (llama-cpp-python 0.3.36)", from its /openapi.json); None for vLLM and the simulator
    server: str | None = None
    # finish_reason "length": the answer ran out of tokens (kept, and the row says so)
    truncated: bool = False
    # set when the token budget was lowered to fit max_model_len (by qfarm or by the server)
    max_tokens_effective: int | None = None
    # None: the run did not ask for the response cache; else whether the reply came from it
    response_cache_hit: bool | None = None
    # a cached reply: the model time its first request took (this job's share of it)
    model_ms_saved: float | None = None


class Claim(Frozen):
    """One claim (or quote) extracted from an answer, with its checks."""

    text: str
    evidence_ids: tuple[str, ...] = ()
    warrant: str | None = None
    verified: bool = False
    anchored: bool = False
    admitted: bool = True
    match_layer: str | None = None  # quote mode: exact / normalized / fuzzy
    problems: tuple[str, ...] = ()  # violation kinds attached to this claim


class Grading(Frozen):
    """The verifier's grade of an answer: the part of ``Verification`` a row carries first."""

    verdict: Verdict = Field(Verdict.UNGROUNDED, description="STRICT, HYBRID or UNGROUNDED (docs/grounding.md, 'Verdict and label')")
    label: Label = Field(Label.UNGROUNDED, description="audit label: EVIDENCE-WARRANTED, ANCHOR-WARRANTED, POINTER-LINKED, UNGROUNDED or an extra label")
    ratio: float = Field(0.0, description="n_verified / max(n_claims, 1)")
    n_claims: int = Field(0, description="claims (quote mode: quotes) extracted from the answer")
    n_verified: int = Field(0, description="claims that passed verification")
    violation_kinds: tuple[ViolationKind, ...] = Field((), description="violation kinds found, sorted and unique")
    # dry run (caps not applied): the BROAD_QUANTIFIER_* kinds the guard would have fired
    would_fire_kinds: tuple[ViolationKind, ...] = Field((), description="BROAD_QUANTIFIER_* kinds the guard would have fired (dry run: caps not applied)")
    format_collapsed: bool = Field(False, description="three or more meaningful lines and no evidence tag (lattice modes)")
    answer_brackets: int = Field(0, description="bracketed spans [..] in the raw answer")
    answer_pointer_count: int = Field(0, description="distinct evidence ids the answer cites")
    answer_chars_with_brackets: int = Field(0, description="characters inside [..] in the answer")
    raw_meaningful_line_count: int = Field(0, description="answer lines over 20 characters")
    quote_match_layers: dict[str, int] | None = Field(None, description="quote mode: quotes matched per layer (exact, normalized, fuzzy)")


class GoldCheck(Frozen):
    """The answer and its evidence against the question file's gold answers and article."""

    gold_in_claims: bool | None = Field(None, description="a gold answer appears in the admitted claims; null without gold answers")
    gold_in_evidence: bool | None = Field(None, description="a gold answer appears in the retrieved evidence; null without gold answers")
    gold_evidence_rank: int | None = Field(None, description="1-based rank of the first passage holding a gold answer")
    article_in_evidence: bool | None = Field(None, description="the question's article is among the evidence; null when it names none")
    article_rank: int | None = Field(None, description="1-based rank of the first passage of the question's article")


class Verification(Grading, GoldCheck):
    """Deterministic verification of one answer (docs/grounding.md, 'Verification')."""

    claims: tuple[Claim, ...] = ()
    tails: tuple[str, ...] = ()  # audit-line tails, e.g. "format collapsed", "broad cap 8"


class CandidateSpan(Frozen):
    """One evidence span the answerability sidecar thinks may hold the denied answer."""

    evidence_id: str
    kind: str
    text: str
    offset_start: int
    offset_end: int
    offset_basis: str = "evidence_object_text"  # offsets index ``Evidence.text``


class Answerability(Frozen):
    """What ``assess_answerability`` found when all three of its clauses fired.

    Field names are the ones the job detail JSON has always carried.
    """

    diagnostic_version: str
    confidence_class: Confidence
    triggered_clauses: tuple[str, ...]
    denial_pattern_matched: str
    extraction_cue_matched: str | None
    extraction_shape: str
    answer_type: str
    subject_tokens: tuple[str, ...]
    candidate_count: int
    threshold: Confidence
    missed_answer_candidate_spans: tuple[CandidateSpan, ...]
    denial_patterns_version: str
    extraction_cues_version: str


class Timings(Frozen):
    queue_wait_ms: float | None = Field(None, description="milliseconds from enqueue to the first stage")
    retrieval_ms: float | None = Field(None, description="the job's share of its batched search plus its evidence fitting, ms")
    llm_ms: float | None = Field(None, description="the job's own model request, slot waits, retries and backoff included, ms")
    ttft_ms: float | None = Field(None, description="time to first token when the gateway streams, ms")
    verify_ms: float | None = Field(None, description="the job's own verification, ms")
    total_ms: float | None = Field(None, description="retrieval_ms + llm_ms + verify_ms")


class JobRef(Frozen):
    """The compact job message on the queue; workers rebuild the Job from the run's manifest.

    Kept small on purpose: a 100k-job sweep holds 100k of these in Redis at once.
    """

    run_id: str
    qid: str
    q: str
    mode: Mode
    i: int = 0
    answers: tuple[str, ...] | None = None
    t: float | None = None  # enqueued at, epoch seconds
    scope: Literal["bounded", "unbounded"] | None = None
    title: str | None = None
    r: tuple[str, ...] | None = None  # Job.retried_errors, only on a retry


class JobRecord(Frozen):
    """The job plus everything each stage has added so far."""

    schema_version: int = 1
    job: Job
    preflight: Preflight | None = None
    retrieval: Retrieval | None = None
    prompt: str | None = None
    generation: Generation | None = None
    verification: Verification | None = None
    answerability: Answerability | None = None
    cache_hit: bool = False
    cache_key: str | None = None  # set at retrieval when the result cache is in use
    error: str | None = None
    error_kind: ErrorKind | None = None  # set with ``error``, by ``failed``
    worker: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    timings: Timings = Field(default_factory=Timings)

    def failed(self, kind: ErrorKind, detail: str, **update: Any) -> JobRecord:
        """This record ending in an error: ``error`` says the kind, then ``detail``."""
        return self.model_copy(update={"error": error_text(kind, detail), "error_kind": kind,
                                       **update})


class Sampling(Frozen):
    """Sampling parameters pinned in every LLM request."""

    temperature: float = 0.7
    max_tokens: int = 512
    seed: int = 0
    stop: tuple[str, ...] = ("<|im_end|>",)
    n: int = 1
    # The answer's grammar (GBNF) when the policy's structured_output is on; the client sends
    # it in the field the endpoint's server reads (qfarm.common.grounding.grammars).
    grammar: str | None = None
    # A single question's request (an ask run): the LLM gateway admits it ahead of sweep
    # requests, into slots the sweep may not take, and with QFARM_LLM_PRIORITY sends it with
    # a higher priority. Request-level, so an ask never shares a micro-batch with a sweep.
    interactive: bool = False
    # The policy's share_samples: the gateway may answer this job with one choice of a
    # request that carries its sibling samples (qfarm.common.sharing). Not sent.
    share_samples: bool = False
    # The run's ``--cache``: the gateway may answer from the response cache, and stores
    # complete replies there. Not sent.
    cache: bool = False


class QuestionSelection(Frozen):
    """Which questions of the file a run took, when not all (``--limit``, ``--sample``):
    the first ``limit``, or ``sample`` of them chosen by ``seed`` (``qfarm.common.questions.
    select_questions``). ``of``: the questions in the file. ``--resume`` chooses them again."""

    limit: int | None = None
    sample: int | None = None
    seed: int | None = None
    of: int


class CostRates(Frozen):
    """What the operator said a run's model time costs (QFARM_LLM_GPUS*, QFARM_LLM_PRICE_*),
    recorded in the manifest so a summary rendered later prices the run the same way."""

    gpus_per_endpoint: float | None = None  # every endpoint's GPUs, unless listed below
    gpus_by_endpoint: dict[str, float] = Field(default_factory=dict)  # URL (redacted) -> GPUs
    price_per_gpu_hour: float | None = None
    price_per_m_prompt_tokens: float | None = None
    price_per_m_completion_tokens: float | None = None
    currency: str = "USD"

    def gpus_for(self, endpoint: str) -> float | None:
        return self.gpus_by_endpoint.get(endpoint.rstrip("/"), self.gpus_per_endpoint)


class Manifest(RunSettings):
    """What a run is: written to disk (and Redis) before any job is enqueued, its settings
    for every job (``RunSettings``) included. Its fields are stated here alone: a new run's
    manifest is built from them (``producer.runs.sweep.make_manifest``), a job from its settings
    (``common.jobs``), the run record from the fields of the same name
    (``producer.reports.record.write_record``). What a run is never changes after the start; at
    its end (and after a ``--retry-errors``) the file is written again to add ``record``
    and ``cost``, what the run did."""

    schema_version: int = 1
    run_id: str
    created_at: float
    question_file: str
    question_file_digest: str
    n_questions: int
    modes: tuple[Mode, ...]
    n: int
    n_jobs: int
    verifier_policy_hash: str
    governance_policy_hash: str
    endpoints: tuple[str, ...] = ()
    simulated: bool = False
    # The server behind the endpoints when qfarm started it, e.g. "llama.cpp server
    # (llama-cpp-python 0.3.36), CPU, local"; None: endpoints configured by the operator.
    llm_server: str | None = None
    retriever: str = Backend.EMBEDDED
    index_version: str | None = None
    corpus: str | None = None
    eager: bool = True
    # Written when the run ends (and after a retry): what decided its rows, with the
    # digests of its files (common/record.py; ``qfarm verify`` checks it).
    record: RunRecord | None = None
    # None: every question of the file (``n_questions`` of them).
    selection: QuestionSelection | None = None
    cost_rates: CostRates = Field(default_factory=CostRates)
    # What the run cost (qfarm.common.reporting.cost.cost_summary), written when the run ends.
    cost: dict[str, Any] | None = None
    # The preflight node of the plan (common.grounding.preflight.plan_preflight_hash); None
    # when the manifest was built without its questions' preflight (by hand, in a benchmark).
    preflight_hash: str | None = None
    # The share of jobs the workers trace live (docs/reports.md, 'Exports'); None: no live
    # tracing. Left out of the JSON when None: an untraced run's manifest has no such field.
    traces: float | None = Field(None, ge=0, le=1, exclude_if=lambda value: value is None)

    @model_validator(mode="before")
    @classmethod
    def _derive(cls, data: Any) -> Any:
        # A new run's derived fields follow from the others, here alone: its job count,
        # its policy's hashes and its model's profile. A manifest read back has them all.
        if not isinstance(data, dict):
            return data
        out = dict(data)
        if "n_jobs" not in out and {"n_questions", "modes", "n"} <= out.keys():
            out["n_jobs"] = out["n_questions"] * len(out["modes"]) * out["n"]
        if "verifier_policy_hash" not in out or "governance_policy_hash" not in out:
            raw = out.get("policy")
            policy = raw if isinstance(raw, Policy) else Policy.model_validate(raw or {})
            out.setdefault("verifier_policy_hash", verifier_policy_hash(policy))
            out.setdefault("governance_policy_hash", governance_policy_hash(policy))
        if "model_profile_id" not in out and isinstance(out.get("model"), str):
            out["model_profile_id"] = profile_id_for_model(out["model"])
        return out

    @field_validator("endpoints")
    @classmethod
    def _no_passwords(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        # The manifest is shown everywhere (summary.md, the API, the viewer) and nothing
        # calls an endpoint from it: a password in QFARM_LLM_ENDPOINTS never lands here,
        # and one in a manifest edited by hand is hidden when it is read.
        return tuple(redact_urls(value))


# --------------------------------------------------------------------------- the row


class AnswerabilitySummary(Frozen):
    answerability_fired: bool = Field(False, description="the answerability sidecar fired: the answer denies what the evidence seems to hold")
    answerability_confidence: Confidence | None = Field(None, description="the sidecar's confidence: weak, medium or strong")
    answerability_candidate_count: int = Field(0, description="candidate answer spans the sidecar found in the evidence")


class Row(Frozen):
    """One telemetry row per job, written once, keyed by (run_id, job_id).

    The fields: docs/grounding.md, 'The row'.
    """

    schema_version: int = Field(ROW_SCHEMA_VERSION, description="version of the row's schema")
    run_id: str = Field(description="the run the job belongs to")
    job_id: str = Field(description="the job: one (question, mode, sample index) of the run")
    question: str = Field(description="the question's text")
    question_id: str = Field(description="the question's id in its question file")
    mode: Mode = Field(description="answer mode: quote, claim_lattice_pointer or claim_lattice")
    sample_index: int = Field(description="sample number of this question and mode, from 0")
    grading: Grading | None = Field(None, description="the verifier's grade; null until verified; its fields are written flat in the JSON")
    question_scope: str | None = Field(None, description="bounded or unbounded when the question file says so")
    quantifier_intensity: Intensity | None = Field(None, description="the quantifier classifier's rung for the question")
    quantifier_matched_token: str | None = Field(None, description="the words that decided the rung")
    quantifier_explicit_count: int | None = Field(None, description="the number a bounded question names")
    scope_bound_hint: str | None = Field(None, description="bounded, unbounded or unknown: whether a broad question names a finite set")
    claim_cap_applied: int | None = Field(None, description="the quantifier guard's claim cap; null when the guard is off for the job")
    claim_cap_profile: int | None = Field(None, description="the profile table's cap for the rung, enforced or not")
    claim_cap_enforced: bool | None = Field(None, description="the cap was applied: excess claims were not admitted")
    # The configured model id, verbatim (what the operator named); the cap profile it
    # resolved to is ``model_profile_key`` ("hermes-3-8b", or "default" when none matched).
    model_profile_id: str | None = Field(None, description="the configured model id, verbatim")
    model_profile_key: str | None = Field(None, description="the cap profile the model id resolved to")
    model: str | None = Field(None, description="the model that answered")
    endpoint: str | None = Field(None, description="the endpoint that answered (passwords redacted)")
    simulated: bool | None = Field(None, description="answered by the vLLM-compatible simulator: SIMULATED")
    llm_server: str | None = Field(None, description="the server's name when it is recognisably not vLLM")
    retriever: str | None = Field(None, description="the retrieval backend")
    index_version: str | None = Field(None, description="the index version (corpus digest, chunker, ranking)")
    evidence_ids: list[str] = Field(default_factory=list, description="evidence ids shown to the model, E1 first")
    top_doc_titles: list[str] = Field(default_factory=list, description="titles of the shown evidence blocks, E1 first")
    top_scores: list[float] = Field(default_factory=list, description="retrieval scores of the shown blocks, E1 first")
    # The shown blocks' passage ids in the index (chunk ids, E1 first): the viewer reads
    # their text back by id and re-runs the verifier, so rows need not carry the text.
    evidence_passage_ids: list[str] = Field(default_factory=list, description="the shown blocks' passage (chunk) ids in the index, E1 first")
    answerability: AnswerabilitySummary | None = Field(None, description="the answerability sidecar's summary")
    gold: GoldCheck | None = Field(None, description="the answer and evidence against the question file's gold answers; written flat in the JSON")
    verifier_policy_hash: str | None = Field(None, description="hash of the policy fields that change verification or the prompt")
    governance_policy_hash: str | None = Field(None, description="hash of every policy field and rule version")
    cache_hit: bool = Field(False, description="the whole row came from the result cache (no stage ran)")
    response_cache_hit: bool | None = Field(None, description="with --cache: the model's reply came from the response cache (the row was verified afresh); absent without --cache")
    model_ms_saved: float | None = Field(None, description="a response-cache hit: the model time the reply first took, ms")
    attempts: int = Field(0, description="model requests made for the job")
    error: str | None = Field(None, description="what went wrong, starting with the error kind; null for an answered job")
    error_kind: ErrorKind | None = Field(None, description="internal, retrieval or llm; null without an error")
    timings: Timings = Field(default_factory=Timings, description="the job's stage timings")
    usage: Usage = Field(default_factory=Usage, description="tokens the job's answer cost")
    llm_request: LlmRequest | None = Field(None, description="the request that answered; null without a model call")
    worker: str | None = Field(None, description="the worker that wrote the row")
    started_at: float | None = Field(None, description="when the job's first stage started, epoch seconds")
    finished_at: float | None = Field(None, description="when the row was built, epoch seconds")
    answer: str | None = Field(None, description="the answer text, only with --keep-answers")
    finish_reason: str | None = Field(None, description="the model's finish reason (stop, length, ...)")
    truncated: bool | None = Field(None, description="the answer ran out of tokens (finish reason length)")
    max_tokens_effective: int | None = Field(None, description="the token budget when it was lowered to fit the context window")
    # The error kinds of the job's earlier attempts that this row replaced (``--retry-errors``);
    # written only when there are any, so a row of a job never retried has no such key
    retried_errors: list[str] = Field(default_factory=list, description="error kinds of the job's earlier attempts this row replaced, oldest first")

    @model_validator(mode="before")
    @classmethod
    def _nest(cls, data: Any) -> Any:
        """Read a flat row (its JSON, a cached row, keyword arguments) back into its parts."""
        if not isinstance(data, dict) or "grading" in data or "gold" in data:
            return data
        data = dict(data)
        parts = {name: {k: data.pop(k) for k in part.model_fields if k in data} for name, part in _ROW_PARTS.items()}
        if parts["grading"].get("verdict") is not None:  # a verified row; otherwise both parts are empty
            data.update(parts)
        return data

    @model_serializer(mode="wrap")
    def _flatten(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Write each part's fields as the row's own keys, where the part stands: rows.jsonl stays flat."""
        flat: dict[str, Any] = {}
        for key, value in handler(self).items():
            part = _ROW_PARTS.get(key)
            if part is None:
                flat[key] = value
            elif value is None:
                flat.update(dict.fromkeys(part.model_fields))
            else:
                flat.update(value)
        for key in ("violation_kinds", "would_fire_kinds"):  # an unverified row lists none
            if flat.get(key, ()) is None:
                flat[key] = []
        if not flat.get("retried_errors"):  # only a retry's row says so: other rows stay as they were
            flat.pop("retried_errors", None)
        # Only a run with --cache says whether the response cache answered: other rows stay
        # as they were.
        for key in ("response_cache_hit", "model_ms_saved"):
            if flat.get(key) is None:
                flat.pop(key, None)
        return flat


# The row's parts that its JSON writes flat, by field name.
_ROW_PARTS: dict[str, type[Frozen]] = {"grading": Grading, "gold": GoldCheck}
