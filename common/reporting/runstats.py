"""Run statistics for reports, filled in one streaming pass over the rows.

``RunStats`` keeps counters per mode, per question × mode and per endpoint,
plus bounded latency sketches. Memory grows with the number of questions and
modes, never with the number of rows. Rows come as ``Row`` models or as the
plain dicts read from ``rows.jsonl``.

Rows with an ``error`` or without a verdict count
as errors, not as verdicts. The headline rates are over the jobs (``Tally.rows``: every
planned job once the run is complete), an error row counting as a failure:
``strict_of_jobs`` and the error rate ``errors``. Every other verdict rate's denominator is
the rows that reached a verdict (``Tally.valid``, "of answered").
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from qfarm.common.models import Row
from qfarm.common.reporting.cost import CostStats
from qfarm.common.reporting.stats import Moments, QuantileSketch
from qfarm.common.vocab import Verdict, ViolationKind

STAGES: tuple[tuple[str, str], ...] = (
    ("queue_wait_ms", "queue wait"),
    ("retrieval_ms", "retrieval"),
    ("llm_ms", "LLM"),
    ("verify_ms", "verify"),
    ("total_ms", "total"),
)
REJECTED_KIND = ViolationKind.BROAD_QUANTIFIER_REJECTED
# The guard's own soft demotes once caps are applied. A HYBRID row whose every claim
# verified and whose only demotes are these (with the TOO_MANY_CLAIMS a cap's trim
# fires beside CAP_APPLIED) was STRICT on what its answer did.
GUARD_DEMOTE_KINDS = frozenset(
    {ViolationKind.BROAD_QUANTIFIER_CAP_APPLIED, ViolationKind.BROAD_QUANTIFIER_SCOPE_UNBOUND}
)
_ANSWER_DEMOTE_KINDS = frozenset({
    ViolationKind.TITLE_MISMATCH, ViolationKind.TOO_MANY_CLAIMS,
    ViolationKind.TOO_MANY_EVIDENCE_IDS, ViolationKind.POINTER_OVERFLOW_TRIMMED,
    ViolationKind.LAZY_ANCHOR_DEMOTE, ViolationKind.NO_EVIDENCE_POINTER,
    ViolationKind.SCHEMA_INVALID, ViolationKind.CITATION_MISMATCH,
})  # fmt: skip


def is_strict_without_guard(verdict: Any, ratio: Any, kinds: Iterable[str]) -> bool:
    """STRICT, or HYBRID only by the guard's own demotions: what the answer did
    (docs/grounding.md, 'Comparing runs: intensity drift, claim count, phase decisions')."""
    if verdict == Verdict.STRICT:
        return True
    found = set(kinds)
    if verdict != Verdict.HYBRID or ratio != 1.0 or not found & GUARD_DEMOTE_KINDS:
        return False
    if ViolationKind.BROAD_QUANTIFIER_CAP_APPLIED in found:
        found.discard(ViolationKind.TOO_MANY_CLAIMS)
    return not found & _ANSWER_DEMOTE_KINDS
MAX_DISTINCT = 50  # distinct error texts, hashes, models... kept before folding into "(other)"
MAX_QUESTION_ROWS = 200
# Error groups besides the ``ErrorKind`` members.
NO_VERDICT = "(no verdict)"
UNKNOWN_KIND = "(kind not recorded)"
QUESTION_TEXT_CHARS = 90


def _bump(counter: Counter[str], key: str, limit: int = MAX_DISTINCT) -> None:
    if key not in counter and len(counter) >= limit:
        key = "(other)"
    counter[key] += 1


class Tally:
    """Verdict and metric counts for one cell (a mode, or a question × mode)."""

    __slots__ = (
        "rows",
        "errors",
        "strict",
        "hybrid",
        "ungrounded",
        "answered_strict",
        "format_collapsed",
        "no_evidence_pointer",
        "gold_n",
        "gold_hits",
        "recall_n",
        "recall_hits",
        "reciprocal_rank",
        "article_n",
        "article_hits",
        "bounded_n",
        "bounded_rejected",
        "ratio",
        "claims",
    )

    def __init__(self) -> None:
        self.rows = self.errors = self.strict = self.hybrid = self.ungrounded = 0
        self.answered_strict = 0
        self.format_collapsed = self.no_evidence_pointer = 0
        self.gold_n = self.gold_hits = self.recall_n = self.recall_hits = 0
        self.reciprocal_rank = 0.0  # summed over rows with gold answers: MRR = this / recall_n
        self.article_n = self.article_hits = 0
        # rows whose question the file marks bounded, and how many reject-broad refused
        self.bounded_n = self.bounded_rejected = 0
        self.ratio = Moments()
        self.claims = Moments()  # n_claims per answer

    @property
    def valid(self) -> int:
        """Rows that reached a verdict: the denominator of every verdict rate."""
        return self.strict + self.hybrid + self.ungrounded

    def add(self, row: Mapping[str, Any], is_error: bool, kinds: list[str]) -> None:
        self.rows += 1
        if is_error:
            self.errors += 1
            return
        verdict = row.get("verdict")
        if verdict == Verdict.STRICT:
            self.strict += 1
        elif verdict == Verdict.HYBRID:
            self.hybrid += 1
        else:
            self.ungrounded += 1
        self.answered_strict += is_strict_without_guard(verdict, row.get("ratio"), kinds)
        if row.get("format_collapsed") or ViolationKind.FORMAT_COLLAPSED in kinds:
            self.format_collapsed += 1
        if ViolationKind.NO_EVIDENCE_POINTER in kinds:
            self.no_evidence_pointer += 1
        if row.get("ratio") is not None:
            self.ratio.add(float(row["ratio"]))
        if row.get("n_claims") is not None:
            self.claims.add(float(row["n_claims"]))
        if row.get("gold_in_claims") is not None:
            self.gold_n += 1
            self.gold_hits += bool(row["gold_in_claims"])
        if row.get("gold_in_evidence") is not None:
            self.recall_n += 1
            self.recall_hits += bool(row["gold_in_evidence"])
            if row.get("gold_evidence_rank"):
                self.reciprocal_rank += 1.0 / int(row["gold_evidence_rank"])
        if row.get("article_in_evidence") is not None:
            self.article_n += 1
            self.article_hits += bool(row["article_in_evidence"])
        if row.get("question_scope") == "bounded":
            self.bounded_n += 1
            self.bounded_rejected += REJECTED_KIND in kinds

    def proportion(self, metric: str) -> tuple[int, int]:
        """(successes, n) of a binary metric; see ``BINARY_METRICS``."""
        if metric == "accuracy":
            return self.gold_hits, self.gold_n
        if metric == "recall":
            return self.recall_hits, self.recall_n
        if metric == "article":
            return self.article_hits, self.article_n
        if metric == "bounded_rejected":
            return self.bounded_rejected, self.bounded_n
        if metric == "errors":
            return self.errors, self.rows
        if metric == "strict_of_jobs":
            return self.strict, self.rows
        return getattr(self, metric), self.valid


BINARY_METRICS = (
    "strict_of_jobs",
    "errors",
    "strict",
    "ungrounded",
    "answered_strict",
    "format_collapsed",
    "no_evidence_pointer",
    "accuracy",
    "recall",
)


class ModeStats:
    __slots__ = (
        "tally",
        "kinds",
        "brackets",
        "latency",
        "prompt_tokens",
        "completion_tokens",
        "answerability",
        "cache_hits",
        "labels",
        "pointers",
        "bracket_chars",
        "bounded_n",
        "bounded_rejected",
        "would_fire",
        "would_demote_strict",
    )

    def __init__(self) -> None:
        self.tally = Tally()
        self.kinds: Counter[str] = Counter()
        self.brackets = Moments()
        self.latency = QuantileSketch()
        self.prompt_tokens = Moments()
        self.completion_tokens = Moments()
        self.answerability: Counter[str] = Counter()
        self.cache_hits = 0
        self.labels: Counter[str] = Counter()
        self.pointers = Moments()  # distinct evidence ids cited per answer
        self.bracket_chars = Moments()  # characters inside [...] per answer
        # questions the question file marks bounded, and how many reject-broad refused
        self.bounded_n = self.bounded_rejected = 0
        # the quantifier guard's dry run: kinds it would have fired, and the STRICT rows
        # one of its soft demotes would have turned HYBRID had caps been applied
        self.would_fire: Counter[str] = Counter()
        self.would_demote_strict = 0


# Would-fire kinds that soft-demote once caps are applied (RUNAWAY only caps the label).
WOULD_DEMOTE_KINDS = frozenset(
    {ViolationKind.BROAD_QUANTIFIER_CAP_APPLIED, ViolationKind.BROAD_QUANTIFIER_SCOPE_UNBOUND}
)


class QuestionStats:
    __slots__ = (
        "order",
        "text",
        "cells",
        "intensity",
        "token",
        "count",
        "scope",
        "caps",
        "profile_caps",
        "enforced",
    )

    def __init__(self, order: int, text: str) -> None:
        self.order = order
        self.text = (
            text if len(text) <= QUESTION_TEXT_CHARS else text[: QUESTION_TEXT_CHARS - 1] + "…"
        )
        self.cells: dict[str, Tally] = {}
        self.intensity: str | None = None
        self.token: str | None = None
        self.count: int | None = None
        self.scope: str | None = None
        self.caps: set[int] = set()  # the guard's caps (guarded modes only)
        self.profile_caps: set[int] = set()  # the profile table's caps, enforced or not
        self.enforced = False


class EndpointStats:
    __slots__ = ("jobs", "errors", "retried", "extra_attempts", "llm")

    def __init__(self) -> None:
        self.jobs = self.errors = self.retried = self.extra_attempts = 0
        self.llm = QuantileSketch()


class RunStats:
    """Everything the summary and the comparison need, filled in one pass over the rows."""

    def __init__(self) -> None:
        self.rows = 0
        self.unreadable = 0
        self.unreadable_lines: list[int] = []
        self.modes: dict[str, ModeStats] = {}
        self.questions: dict[str, QuestionStats] = {}
        self.endpoints: dict[str, EndpointStats] = {}
        self.stages = {key: QuantileSketch() for key, _ in STAGES}
        self.kinds_seen: dict[str, None] = {}
        self.would_fire_seen: dict[str, None] = {}
        # Error rows by kind (``ErrorKind``; NO_VERDICT for a row with neither an error nor
        # a verdict, UNKNOWN_KIND for one written before rows said their kind), and the
        # first error text seen of each kind.
        self.errors: Counter[str] = Counter()
        self.error_examples: dict[str, str] = {}
        self.cache_hits = 0
        # --cache: rows that asked the response cache, those it answered, and the model time
        # their replies first took
        self.response_cache_asked = 0
        self.response_cache_hits = 0
        self.model_ms_saved = 0.0
        # rows written by a ``--retry-errors`` attempt, and how many of them are errors again
        self.from_retry = 0
        self.from_retry_errors = 0
        self.first_started: float | None = None
        self.last_finished: float | None = None
        self.verifier_hashes: Counter[str] = Counter()
        self.governance_hashes: Counter[str] = Counter()
        self.models: Counter[str] = Counter()
        self.retrievers: Counter[str] = Counter()
        self.index_versions: Counter[str] = Counter()
        self.simulated_rows = 0
        self.truncated: Counter[str] = Counter()  # mode -> answers cut off at max_tokens
        self.budget_lowered: Counter[str] = Counter()  # mode -> max_tokens lowered to fit context
        self.cost = CostStats()  # tokens and model time (qfarm.common.reporting.cost)
        # One 8-byte key a row's job id, to count jobs, not lines: a deleted row and a
        # duplicated one leave the line count as it was (8 MB at a million rows).
        self._job_keys = array("q")
        self._jobs_counted: tuple[int, int] = (0, 0)  # (keys seen, distinct among them)

    @property
    def jobs(self) -> int:
        """Distinct job ids among the rows: what "N of M jobs have a row" counts."""
        seen, distinct = self._jobs_counted
        if seen != len(self._job_keys):
            keys = np.frombuffer(self._job_keys, dtype=np.int64)
            self._jobs_counted = (len(keys), int(np.unique(keys).size))
        return self._jobs_counted[1]

    @property
    def error_rows(self) -> int:
        """Rows with an error or without a verdict."""
        return sum(self.errors.values())

    @property
    def duplicates(self) -> int:
        """Rows for a job that already had one (rows.jsonl holds each job once)."""
        return len(self._job_keys) - self.jobs

    def note_unreadable(self, lineno: int) -> None:
        self.unreadable += 1
        if len(self.unreadable_lines) < 10:
            self.unreadable_lines.append(lineno)

    def add(self, row: Row | Mapping[str, Any]) -> None:
        r: Mapping[str, Any] = row.model_dump(mode="json") if isinstance(row, Row) else row
        self.rows += 1
        # hash() is salted per process: keys are compared within this one pass only.
        self._job_keys.append(hash(str(r.get("job_id"))))
        mode = str(r.get("mode"))
        error = r.get("error")
        is_error = bool(error) or r.get("verdict") is None
        kinds = list(r.get("violation_kinds") or [])
        m = self.modes.get(mode) or self.modes.setdefault(mode, ModeStats())
        m.tally.add(r, is_error, kinds)
        self._add_question(r, mode, is_error, kinds)
        self._add_endpoint(r, is_error)
        timings = r.get("timings") or {}
        for key, _ in STAGES:
            if timings.get(key) is not None:
                self.stages[key].add(float(timings[key]))
        if r.get("cache_hit"):
            self.cache_hits += 1
            m.cache_hits += 1
        if r.get("response_cache_hit") is not None:  # a run with --cache
            self.response_cache_asked += 1
            if r["response_cache_hit"]:
                self.response_cache_hits += 1
                self.model_ms_saved += float(r.get("model_ms_saved") or 0.0)
        if r.get("retried_errors"):
            self.from_retry += 1
            self.from_retry_errors += is_error
        if is_error:
            kind = str(r.get("error_kind") or UNKNOWN_KIND) if error else NO_VERDICT
            self.errors[kind] += 1
            if error and kind not in self.error_examples:
                self.error_examples[kind] = (str(error).splitlines() or [""])[0][:120]
        else:
            self._add_verdict_row(r, m, kinds, timings)
        self._add_provenance(r)
        self.cost.add(r)
        if r.get("truncated"):
            self.truncated[mode] += 1
        if r.get("max_tokens_effective") is not None:
            self.budget_lowered[mode] += 1

    def _add_verdict_row(
        self, r: Mapping[str, Any], m: ModeStats, kinds: list[str], timings: Mapping[str, Any]
    ) -> None:
        for kind in kinds:
            m.kinds[kind] += 1
            self.kinds_seen.setdefault(kind, None)
        would_fire = list(r.get("would_fire_kinds") or [])
        for kind in would_fire:
            m.would_fire[kind] += 1
            self.would_fire_seen.setdefault(kind, None)
        if r.get("verdict") == Verdict.STRICT and WOULD_DEMOTE_KINDS.intersection(would_fire):
            m.would_demote_strict += 1
        if r.get("answer_brackets") is not None:
            m.brackets.add(float(r["answer_brackets"]))
        if r.get("answer_pointer_count") is not None:
            m.pointers.add(float(r["answer_pointer_count"]))
        if r.get("answer_chars_with_brackets") is not None:
            m.bracket_chars.add(float(r["answer_chars_with_brackets"]))
        if r.get("label") is not None:
            _bump(m.labels, str(r["label"]))
        if r.get("question_scope") == "bounded":
            m.bounded_n += 1
            m.bounded_rejected += REJECTED_KIND in kinds
        if timings.get("total_ms") is not None:
            m.latency.add(float(timings["total_ms"]))
        usage = r.get("usage") or {}
        if usage.get("prompt_tokens") is not None:
            m.prompt_tokens.add(float(usage["prompt_tokens"]))
        if usage.get("completion_tokens") is not None:
            m.completion_tokens.add(float(usage["completion_tokens"]))
        answerability = r.get("answerability") or {}
        if answerability.get("answerability_fired"):
            m.answerability[str(answerability.get("answerability_confidence") or "unknown")] += 1

    def _add_question(
        self, r: Mapping[str, Any], mode: str, is_error: bool, kinds: list[str]
    ) -> None:
        qid = str(r.get("question_id"))
        q = self.questions.get(qid)
        if q is None:
            q = self.questions[qid] = QuestionStats(
                len(self.questions), str(r.get("question") or "")
            )
        cell = q.cells.get(mode) or q.cells.setdefault(mode, Tally())
        cell.add(r, is_error, kinds)
        if r.get("quantifier_intensity") is not None and q.intensity is None:
            q.intensity = r["quantifier_intensity"]
            q.token = r.get("quantifier_matched_token")
            q.count = r.get("quantifier_explicit_count")
            q.scope = r.get("scope_bound_hint")
        if r.get("claim_cap_applied") is not None and len(q.caps) < 8:
            q.caps.add(int(r["claim_cap_applied"]))
        if r.get("claim_cap_profile") is not None and len(q.profile_caps) < 8:
            q.profile_caps.add(int(r["claim_cap_profile"]))
        q.enforced = q.enforced or bool(r.get("claim_cap_enforced"))

    def _add_endpoint(self, r: Mapping[str, Any], is_error: bool) -> None:
        name = str(r.get("endpoint") or "(none)")
        e = self.endpoints.get(name)
        if e is None:
            if len(self.endpoints) >= MAX_DISTINCT:
                name = "(other)"
            e = self.endpoints.setdefault(name, EndpointStats())
        e.jobs += 1
        attempts = int(r.get("attempts") or 0)
        if attempts > 1:
            e.retried += 1
            e.extra_attempts += attempts - 1
        if is_error:
            e.errors += 1
        llm_ms = (r.get("timings") or {}).get("llm_ms")
        if llm_ms is not None:
            e.llm.add(float(llm_ms))

    def _add_provenance(self, r: Mapping[str, Any]) -> None:
        started, finished = r.get("started_at"), r.get("finished_at")
        if started is not None:
            self.first_started = min(started, self.first_started or math.inf)
        if finished is not None:
            self.last_finished = max(finished, self.last_finished or -math.inf)
        for key, counter in (
            ("verifier_policy_hash", self.verifier_hashes),
            ("governance_policy_hash", self.governance_hashes),
            ("model", self.models),
            ("retriever", self.retrievers),
            ("index_version", self.index_versions),
        ):
            if r.get(key) is not None:
                _bump(counter, str(r[key]))
        self.simulated_rows += bool(r.get("simulated"))

    def clusters(self, mode: str, metric: str) -> list[tuple[int, int]]:
        """(successes, n) of a binary metric per question, in ``mode``: what a rate's
        interval needs to see the samples of one question as one cluster."""
        cells = (q.cells.get(mode) for q in self.questions.values())
        return [c.proportion(metric) for c in cells if c is not None]

    def mean_clusters(self, mode: str, metric: str) -> list[tuple[float, int]]:
        """(sum, n) per question of a mean metric (``ratio`` or ``claims``) in ``mode``."""
        out = []
        for q in self.questions.values():
            cell = q.cells.get(mode)
            if cell is not None:
                m = cell.claims if metric == "claims" else cell.ratio
                out.append((m.total, m.n))
        return out

    def mode_order(self, manifest_modes: Iterable[str] = ()) -> list[str]:
        """Modes in the manifest's order, then any others the rows carry."""
        order = [str(m) for m in manifest_modes]
        return order + [m for m in self.modes if m not in order]


def accumulate(rows: Iterable[Row | Mapping[str, Any]], stats: RunStats | None = None) -> RunStats:
    """One streaming pass over ``rows``."""
    stats = stats or RunStats()
    for row in rows:
        stats.add(row)
    return stats
