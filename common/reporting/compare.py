"""A/B comparison of two runs: per mode and metric, is the delta signal or noise?

A delta is ``signal`` only when both hold: it clears the floor (``|Δ| ≥
floor``, 5 points by default: smaller effects are not worth acting on even
when real) and its 95% interval excludes zero (it is unlikely to be chance at
this n). Anything else is ``noise``.

The interval is paired by question when the runs share at least two
questions: per question, the B rate minus the A rate; a t interval over those
per-question deltas, centred on the pooled delta. Pairing removes the
between-question spread (some questions are always STRICT, some never), which
dominates a sweep's variance, and makes the question the unit, so the n
samples of one question (n > 1) never count as independent evidence. Runs
without shared questions fall back to Newcombe's interval for two independent
proportions (Welch's for the mean ratio), built on each run's intervals
clustered by question when its questions were sampled more than once. Rates are in points (percent); the mean ratio's delta is in points of
ratio × 100.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from qfarm.common.models import Manifest
from qfarm.common.record import record_differences
from qfarm.common.reporting.phase import (
    DEFAULT_FLOOR,
    PhaseDecision,
    phase_decision,
    render_phase,
)
from qfarm.common.reporting.report import md_table, plots_section
from qfarm.common.reporting.runstats import RunStats, Tally
from qfarm.common.reporting.stats import (
    Moments,
    cluster_newcombe_interval,
    cluster_welch_interval,
    is_one_per_cluster,
    paired_interval,
    welch_interval,
)


class DeltaVerdict(StrEnum):
    """Whether a difference between two runs is worth acting on (not a grounding ``Verdict``)."""

    SIGNAL = "signal"
    NOISE = "noise"
    NOT_APPLICABLE = "n/a"


MEAN_METRICS = ("ratio", "claims")


@dataclass(frozen=True)
class Metric:
    key: str  # a ``Tally.proportion`` metric, "ratio" or "claims"
    label: str
    higher_is_better: bool | None  # None: neither direction is better in itself

    @property
    def is_rate(self) -> bool:
        return self.key not in MEAN_METRICS

    def moments(self, cell: Tally) -> Moments:
        return cell.claims if self.key == "claims" else cell.ratio


METRICS: tuple[Metric, ...] = (
    # The headline: over the jobs, an error row counting as a failure; and the error rate
    # itself, so a run whose endpoint failed reads worse than a clean one.
    Metric("strict_of_jobs", "strict-rate (of jobs; errors fail)", True),
    Metric("errors", "error rate (of jobs)", False),
    Metric("strict", "strict-rate (of answered)", True),
    Metric("ungrounded", "UNGROUNDED rate (of answered)", False),
    # HYBRID has no better direction (it gains from STRICT and from UNGROUNDED alike); with
    # the other two it makes the verdict distribution the caps decision reads.
    Metric("hybrid", "HYBRID rate (of answered)", None),
    # STRICT counting a row the guard's own cap or scope demotion made HYBRID: what the
    # answers did, on which caps are judged (they must not vote for themselves).
    Metric("answered_strict", "strict-rate without the guard's demotions", True),
    Metric("ratio", "mean ratio", True),
    Metric("format_collapsed", "FORMAT_COLLAPSED rate", False),
    Metric("no_evidence_pointer", "NO_EVIDENCE_POINTER rate", False),
    Metric("accuracy", "answer accuracy", True),
    Metric("recall", "retrieval recall", True),
    # Δ in percent of A's mean, so the same 5-point floor reads "5% more or fewer claims".
    Metric("claims", "mean claims per answer", None),
)


@dataclass(frozen=True)
class MetricDelta:
    mode: str
    metric: Metric
    a: float | None  # points (rates) or ratio in [0, 1]
    b: float | None
    n_a: int
    n_b: int
    delta: float | None  # points
    low: float | None  # points
    high: float | None
    method: str
    verdict: DeltaVerdict
    effect: str  # "better" / "worse" for a signal, else "—"
    questions: int = 0  # questions the paired interval is over (0: unpaired)


@dataclass(frozen=True)
class KindShift:
    mode: str
    kind: str
    count_a: int
    count_b: int
    a: float | None  # share of rows with a verdict, points
    b: float | None

    @property
    def delta(self) -> float | None:
        return None if self.a is None or self.b is None else self.b - self.a


DRIFT_POINTS = 5.0  # a rung whose share of questions moves by more than this is flagged


@dataclass(frozen=True)
class IntensityShift:
    """One rung's share of the classified questions in A and B (points)."""

    rung: str
    count_a: int
    count_b: int
    share_a: float | None
    share_b: float | None

    @property
    def delta(self) -> float | None:
        if self.share_a is None or self.share_b is None:
            return None
        return self.share_b - self.share_a

    @property
    def drifted(self) -> bool:
        return self.delta is not None and abs(self.delta) > DRIFT_POINTS


@dataclass(frozen=True)
class RungChange:
    question_id: str
    question: str
    rung_a: str
    rung_b: str


@dataclass
class Comparison:
    run_a: str
    run_b: str
    floor: float
    manifest_a: Manifest
    manifest_b: Manifest
    rows_a: int
    rows_b: int
    errors_a: int = 0  # rows with an error or without a verdict
    errors_b: int = 0
    deltas: list[MetricDelta] = field(default_factory=list)
    kind_shifts: list[KindShift] = field(default_factory=list)
    policy_changes: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    mixed: list[str] = field(default_factory=list)
    intensity: list[IntensityShift] = field(default_factory=list)
    rung_changes: list[RungChange] = field(default_factory=list)
    phase: PhaseDecision | None = None
    # per mode, the share of rows (points) that were STRICT while the dry run recorded a
    # kind that demotes once caps are applied, in A and in B (None: that run is no dry run)
    would_demote: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)

    @property
    def signals(self) -> list[MetricDelta]:
        return [d for d in self.deltas if d.verdict == "signal"]


def classify_delta(
    delta: float, low: float, high: float, floor: float = DEFAULT_FLOOR
) -> DeltaVerdict:
    """``signal`` when |delta| clears the floor and the interval excludes zero, else ``noise``."""
    if any(math.isnan(x) for x in (delta, low, high)):
        return DeltaVerdict.NOT_APPLICABLE
    excludes_zero = low > 0 or high < 0
    return DeltaVerdict.SIGNAL if abs(delta) >= floor and excludes_zero else DeltaVerdict.NOISE


def _cell_value(cell: Tally, metric: Metric) -> tuple[float, float, int] | None:
    """(numerator, denominator-weighted value, n) of a metric in one cell; None when n is 0."""
    if metric.is_rate:
        k, n = cell.proportion(metric.key)
        return (k, k / n, n) if n else None
    m = metric.moments(cell)
    if m.n == 0:
        return None
    return (m.total, m.total / m.n, m.n)


def _paired(
    stats_a: RunStats, stats_b: RunStats, mode: str, metric: Metric, shared: list[str]
) -> tuple[float, float, int, int, list[float]]:
    """Pooled A and B values over shared questions, their n, and the per-question deltas."""
    sum_a = sum_b = 0.0
    n_a = n_b = 0
    deltas: list[float] = []
    for qid in shared:
        cell_a = stats_a.questions[qid].cells.get(mode)
        cell_b = stats_b.questions[qid].cells.get(mode)
        va = _cell_value(cell_a, metric) if cell_a else None
        vb = _cell_value(cell_b, metric) if cell_b else None
        if va is None or vb is None:
            continue
        sum_a, n_a = sum_a + va[0], n_a + va[2]
        sum_b, n_b = sum_b + vb[0], n_b + vb[2]
        deltas.append(vb[1] - va[1])
    a = sum_a / n_a if n_a else math.nan
    b = sum_b / n_b if n_b else math.nan
    return a, b, n_a, n_b, deltas


def _unpaired(
    stats_a: RunStats, stats_b: RunStats, mode: str, metric: Metric
) -> tuple[float, float, int, int, tuple[float, float], str]:
    """B − A without shared questions; each run's samples of one question are one cluster
    (with one sample per question these are Newcombe's and Welch's intervals exactly)."""
    ta = stats_a.modes[mode].tally if mode in stats_a.modes else Tally()
    tb = stats_b.modes[mode].tally if mode in stats_b.modes else Tally()
    if metric.is_rate:
        (ka, na), (kb, nb) = ta.proportion(metric.key), tb.proportion(metric.key)
        a = ka / na if na else math.nan
        b = kb / nb if nb else math.nan
        ca, cb = stats_a.clusters(mode, metric.key), stats_b.clusters(mode, metric.key)
        clustered = not (is_one_per_cluster(ca) and is_one_per_cluster(cb))
        method = "Newcombe, clustered by question" if clustered else "Newcombe (unpaired)"
        return a, b, na, nb, cluster_newcombe_interval(ca, cb), method + (" (unpaired)" * clustered)
    ma, mb = metric.moments(ta), metric.moments(tb)
    a = ma.mean if ma.mean is not None else math.nan
    b = mb.mean if mb.mean is not None else math.nan
    ca_m = stats_a.mean_clusters(mode, metric.key)
    cb_m = stats_b.mean_clusters(mode, metric.key)
    if all(n <= 1 for _, n in ca_m) and all(n <= 1 for _, n in cb_m):
        return a, b, ma.n, mb.n, welch_interval(ma, mb), "Welch (unpaired)"
    interval = cluster_welch_interval(ca_m, cb_m)
    return a, b, ma.n, mb.n, interval, "Welch, clustered by question (unpaired)"


def compare_metric(
    stats_a: RunStats,
    stats_b: RunStats,
    mode: str,
    metric: Metric,
    *,
    floor: float = DEFAULT_FLOOR,
    shared: list[str] | None = None,
) -> MetricDelta:
    """One (mode, metric) cell of the comparison."""
    shared = shared if shared is not None else shared_questions(stats_a, stats_b)
    a, b, n_a, n_b, deltas = _paired(stats_a, stats_b, mode, metric, shared)
    if len(deltas) >= 2:
        low, high = paired_interval(deltas, centre=b - a)
        method = f"paired over {len(deltas)} questions"
    else:
        a, b, n_a, n_b, (low, high), method = _unpaired(stats_a, stats_b, mode, metric)
    relative = metric.key == "claims"
    if not n_a or not n_b or math.isnan(a) or math.isnan(b) or (relative and a <= 0):
        return MetricDelta(
            mode, metric, None, None, n_a, n_b, None, None, None, "no data",
            DeltaVerdict.NOT_APPLICABLE, "—",
        )
    unit = 100 / a if relative else 100
    delta, low_pp, high_pp = unit * (b - a), unit * low, unit * high
    verdict = classify_delta(delta, low_pp, high_pp, floor)
    effect = "—"
    if verdict == "signal" and metric.higher_is_better is None:
        effect = "more" if delta > 0 else "fewer"
    elif verdict == "signal":
        effect = "better" if (delta > 0) == metric.higher_is_better else "worse"
    scale = 100.0 if metric.is_rate else 1.0
    return MetricDelta(
        mode,
        metric,
        a * scale,
        b * scale,
        n_a,
        n_b,
        delta,
        low_pp,
        high_pp,
        method,
        verdict,
        effect,
        len(deltas) if len(deltas) >= 2 else 0,
    )


def shared_questions(stats_a: RunStats, stats_b: RunStats) -> list[str]:
    return [qid for qid in stats_a.questions if qid in stats_b.questions]


def _kind_shifts(stats_a: RunStats, stats_b: RunStats, modes: list[str]) -> list[KindShift]:
    kinds = sorted(set(stats_a.kinds_seen) | set(stats_b.kinds_seen))
    shifts = []
    for mode in modes:
        ma, mb = stats_a.modes.get(mode), stats_b.modes.get(mode)
        for kind in kinds:
            ca = ma.kinds[kind] if ma else 0
            cb = mb.kinds[kind] if mb else 0
            va, vb = (ma.tally.valid if ma else 0), (mb.tally.valid if mb else 0)
            shifts.append(
                KindShift(
                    mode,
                    kind,
                    ca,
                    cb,
                    100 * ca / va if va else None,
                    100 * cb / vb if vb else None,
                )
            )
    return shifts


def _intensity_shifts(stats_a: RunStats, stats_b: RunStats) -> list[IntensityShift]:
    from qfarm.common.grounding.quantifier import PRIORITY  # keeps this module's imports light

    counts_a = Counter(q.intensity for q in stats_a.questions.values() if q.intensity)
    counts_b = Counter(q.intensity for q in stats_b.questions.values() if q.intensity)
    total_a, total_b = sum(counts_a.values()), sum(counts_b.values())
    rungs: list[str] = [r for r in reversed(PRIORITY) if r in counts_a or r in counts_b]
    rungs += sorted((set(counts_a) | set(counts_b)) - set(rungs))
    return [
        IntensityShift(
            rung,
            counts_a[rung],
            counts_b[rung],
            100 * counts_a[rung] / total_a if total_a else None,
            100 * counts_b[rung] / total_b if total_b else None,
        )
        for rung in rungs
    ]


def _rung_changes(stats_a: RunStats, stats_b: RunStats, shared: list[str]) -> list[RungChange]:
    changes = []
    for qid in shared:
        qa, qb = stats_a.questions[qid], stats_b.questions[qid]
        if qa.intensity and qb.intensity and qa.intensity != qb.intensity:
            changes.append(RungChange(qid, qb.text, qa.intensity, qb.intensity))
    return changes


def _would_demote(man: Manifest, stats: RunStats, mode: str) -> float | None:
    """Strict-rate points the guard's own soft demotes would take once caps are applied."""
    policy, m = man.policy, stats.modes.get(mode)
    if not policy.quantifier_guard_enabled or policy.quantifier_guard_apply_caps or m is None:
        return None
    return 100 * m.would_demote_strict / m.tally.valid if m.tally.valid else None


def _provenance_warnings(a: Manifest, b: Manifest, n_shared: int, n_a: int, n_b: int) -> list[str]:
    """Ways the runs differ beyond the policy: each makes a delta harder to attribute."""
    warnings = []
    if a.question_file_digest != b.question_file_digest:
        warnings.append(
            f"Different question files: A `{a.question_file}` ({a.question_file_digest}) vs "
            f"B `{b.question_file}` ({b.question_file_digest}); {n_shared} question(s) shared"
            + (", deltas paired over those." if n_shared >= 2 else ", deltas are unpaired.")
        )
    for label, va, vb in (
        ("model", a.model, b.model),
        ("model profile", a.model_profile_id, b.model_profile_id),
        ("retriever", a.retriever, b.retriever),
        ("index version", a.index_version, b.index_version),
        ("corpus", a.corpus, b.corpus),
    ):
        if va != vb:
            warnings.append(f"Different {label}: A `{va}` vs B `{vb}`.")
    if a.preflight_hash and b.preflight_hash and a.preflight_hash != b.preflight_hash:
        warnings.append(
            f"Different preflights: A `{a.preflight_hash}` vs B `{b.preflight_hash}`: the runs' "
            "questions were classified or capped differently (classifier, cap table or corpus "
            "titles), so a rung or cap, not only the policy, may have moved a delta."
        )
    warnings += record_differences(a.record, b.record)
    if a.simulated != b.simulated:
        sim = "A" if a.simulated else "B"
        warnings.append(f"Only run {sim} is SIMULATED: the other used real endpoints.")
    if n_a < a.n_jobs or n_b < b.n_jobs:
        warnings.append(
            f"Incomplete runs: A has {n_a} of {a.n_jobs} rows, B has {n_b} of {b.n_jobs}."
        )
    return warnings


def _policy_changes(a: Manifest, b: Manifest) -> dict[str, tuple[Any, Any]]:
    pa, pb = a.policy.model_dump(mode="json"), b.policy.model_dump(mode="json")
    return {k: (pa.get(k), pb.get(k)) for k in sorted(set(pa) | set(pb)) if pa.get(k) != pb.get(k)}


def _mixed_effects(deltas: list[MetricDelta]) -> list[str]:
    """Where a change helps one mode and hurts another (signals only)."""
    lines = []
    for metric in METRICS:
        cells = [d for d in deltas if d.metric == metric and d.delta is not None]
        better = [d for d in cells if d.effect == "better"]
        worse = [d for d in cells if d.effect == "worse"]
        if better and worse:
            helps = ", ".join(f"`{d.mode}` ({d.delta:+.1f} pp)" for d in better)
            hurts = ", ".join(f"`{d.mode}` ({d.delta:+.1f} pp)" for d in worse)
            lines.append(f"{metric.label}: helps {helps}; hurts {hurts}.")
    helped: dict[str, list[str]] = {}
    hurt: dict[str, list[str]] = {}
    for d in deltas:
        if d.effect in ("better", "worse"):
            (helped if d.effect == "better" else hurt).setdefault(d.mode, []).append(d.metric.label)
    if any(m1 != m2 for m1 in helped for m2 in hurt):
        helps = "; ".join(f"`{m}` ({', '.join(v)})" for m, v in helped.items())
        hurts = "; ".join(f"`{m}` ({', '.join(v)})" for m, v in hurt.items())
        lines.append(f"across modes: better in {helps}; worse in {hurts}.")
    return lines


def compare_runs(
    manifest_a: Manifest | Mapping[str, Any],
    stats_a: RunStats,
    manifest_b: Manifest | Mapping[str, Any],
    stats_b: RunStats,
    *,
    floor: float = DEFAULT_FLOOR,
) -> Comparison:
    """Compare run B against run A (B − A) for every mode both ran and every metric."""
    if floor < 0:
        raise ValueError(f"floor must be >= 0 points, got {floor}")
    ma = manifest_a if isinstance(manifest_a, Manifest) else Manifest.model_validate(manifest_a)
    mb = manifest_b if isinstance(manifest_b, Manifest) else Manifest.model_validate(manifest_b)
    modes_a = stats_a.mode_order(m.value for m in ma.modes)
    modes_b = stats_b.mode_order(m.value for m in mb.modes)
    modes = [m for m in modes_a if m in modes_b]
    shared = shared_questions(stats_a, stats_b)
    cmp = Comparison(
        run_a=ma.run_id,
        run_b=mb.run_id,
        floor=floor,
        manifest_a=ma,
        manifest_b=mb,
        rows_a=stats_a.rows,
        rows_b=stats_b.rows,
        errors_a=stats_a.error_rows,
        errors_b=stats_b.error_rows,
    )
    for mode in modes:
        for metric in METRICS:
            cmp.deltas.append(
                compare_metric(stats_a, stats_b, mode, metric, floor=floor, shared=shared)
            )
    cmp.kind_shifts = _kind_shifts(stats_a, stats_b, modes)
    cmp.policy_changes = _policy_changes(ma, mb)
    cmp.warnings = _provenance_warnings(ma, mb, len(shared), stats_a.rows, stats_b.rows)
    cmp.warnings += _error_warnings(cmp)
    only = sorted(set(modes_a) ^ set(modes_b))
    if only:
        cmp.notes.append(
            "Modes in only one run, not compared: " + ", ".join(f"`{m}`" for m in only) + "."
        )
    if not cmp.policy_changes:
        cmp.notes.append(
            "The runs share the same policy: any delta is sampling variation or a change "
            "outside the policy (see the warnings)."
        )
    if ma.simulated and mb.simulated:
        cmp.notes.append("Both runs are SIMULATED: deltas describe the simulator, not the model.")
    cmp.mixed = _mixed_effects(cmp.deltas)
    cmp.intensity = _intensity_shifts(stats_a, stats_b)
    cmp.rung_changes = _rung_changes(stats_a, stats_b, shared)
    cmp.would_demote = {
        mode: (_would_demote(ma, stats_a, mode), _would_demote(mb, stats_b, mode)) for mode in modes
    }
    cmp.phase = phase_decision(cmp)
    return cmp


def _error_warnings(cmp: Comparison) -> list[str]:
    """Error rows are failures in the headline rates and left out of the rates "of
    answered": say how many each run has, so the latter are never read alone."""
    if not cmp.errors_a and not cmp.errors_b:
        return []
    return [f"Error rows: A {_errors_fact(cmp.errors_a, cmp.rows_a)}, B "
            f"{_errors_fact(cmp.errors_b, cmp.rows_b)}; they count as failures in the rates "
            "of jobs and are left out of the rates of answered rows."]


def _errors_fact(errors: int, rows: int) -> str:
    return f"{errors} of {rows} ({100 * errors / rows:.1f} %)" if rows else "0"


# --------------------------------------------------------------------------- rendering


def _fmt_value(d: MetricDelta, value: float | None) -> str:
    if value is None:
        return "—"
    if d.metric.key == "claims":
        return f"{value:.2f}"
    return f"{value:.1f}%" if d.metric.is_rate else f"{value:.3f}"


def _fmt_interval(low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return "—"
    if math.isinf(low) or math.isinf(high):
        return "unbounded"
    return f"[{low:+.1f}, {high:+.1f}]"


def headline(cmp: Comparison) -> list[str]:
    """The at-a-glance lines: every signal, or a sentence saying there is none."""
    if not cmp.signals:
        return [
            f"No metric moved by at least {cmp.floor:g} points with a 95% interval excluding "
            "zero: every difference here is noise at this n."
        ]
    return [
        f"{d.effect.upper()}: `{d.mode}` {d.metric.label} {d.delta:+.1f} pp "
        f"(95% CI {_fmt_interval(d.low, d.high)}, {_fmt_value(d, d.a)} → {_fmt_value(d, d.b)})"
        for d in cmp.signals
        if d.delta is not None
    ]


def _run_facts(cmp: Comparison) -> list[str]:
    a, b = cmp.manifest_a, cmp.manifest_b
    facts = [
        ("run id", f"`{a.run_id}`", f"`{b.run_id}`"),
        ("question file", f"`{a.question_file}`", f"`{b.question_file}`"),
        ("question digest", a.question_file_digest, b.question_file_digest),
        ("modes", ", ".join(a.modes), ", ".join(b.modes)),
        ("n", str(a.n), str(b.n)),
        ("rows", f"{cmp.rows_a} of {a.n_jobs}", f"{cmp.rows_b} of {b.n_jobs}"),
        ("error rows", _errors_fact(cmp.errors_a, cmp.rows_a),
         _errors_fact(cmp.errors_b, cmp.rows_b)),
        ("model", f"`{a.model}`", f"`{b.model}`"),
        ("LLM", "SIMULATED" if a.simulated else "real", "SIMULATED" if b.simulated else "real"),
        (
            "retriever / index",
            f"{a.retriever} `{a.index_version}`",
            f"{b.retriever} `{b.index_version}`",
        ),
        ("verifier_policy_hash", f"`{a.verifier_policy_hash}`", f"`{b.verifier_policy_hash}`"),
        (
            "governance_policy_hash",
            f"`{a.governance_policy_hash}`",
            f"`{b.governance_policy_hash}`",
        ),
        ("preflight_hash", f"`{a.preflight_hash or '—'}`", f"`{b.preflight_hash or '—'}`"),
    ]
    lines = ["| | A | B |", "|---|---|---|"]
    return lines + [f"| {k} | {va} | {vb} |" for k, va, vb in facts]


def render_compare(cmp: Comparison, *, plots: Mapping[str, str] | None = None) -> str:
    """``compare.md`` for a comparison."""
    out = [f"# qfarm compare: A `{cmp.run_a}` → B `{cmp.run_b}`", ""]
    if cmp.manifest_a.simulated or cmp.manifest_b.simulated:
        out += ["> **SIMULATED.** At least one run used the vLLM simulator, not a real model.", ""]
    out += _run_facts(cmp)
    out += ["", "## What changed", ""]
    if cmp.policy_changes:
        out += [
            f"- `{k}`: {json.dumps(va)} → {json.dumps(vb)}"
            for k, (va, vb) in cmp.policy_changes.items()
        ]
    else:
        out.append("- no policy field differs")
    if cmp.warnings:
        out += ["", "**Warnings: the runs differ in more than the policy**", ""]
        out += [f"- {w}" for w in cmp.warnings]
    if cmp.notes:
        out += [""] + [f"- {n}" for n in cmp.notes]
    out += ["", "## Verdict", ""] + [f"- {line}" for line in headline(cmp)]
    if cmp.mixed:
        out += ["", "**Mixed effects: the change helps one mode and hurts another**", ""]
        out += [f"- {line}" for line in cmp.mixed]
    out += [
        "",
        "## Per mode and metric",
        "",
        f"Δ = B − A in points (mean claims per answer: in percent of A's mean). `signal` needs "
        f"|Δ| ≥ {cmp.floor:g} points and a 95% interval excluding zero; otherwise `noise`.",
        "",
        "| mode | metric | A | B | Δ pp | 95% CI (pp) | n A / n B | interval | verdict | effect |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for d in cmp.deltas:
        delta = "—" if d.delta is None else f"{d.delta:+.1f}"
        out.append(
            f"| `{d.mode}` | {d.metric.label} | {_fmt_value(d, d.a)} | {_fmt_value(d, d.b)} | "
            f"{delta} | {_fmt_interval(d.low, d.high)} | {d.n_a} / {d.n_b} | {d.method} | "
            f"{d.verdict} | {d.effect} |"
        )
    out += ["", "## Violation-kind shifts", ""]
    if not cmp.kind_shifts:
        out.append("Neither run recorded a violation kind.")
    else:
        out += ["Share of rows with a verdict that carry each kind.", ""]
        out += ["| mode | kind | A | B | Δ pp |", "|---|---|---|---|---|"]
        for s in cmp.kind_shifts:
            a = "—" if s.a is None else f"{s.a:.1f}% ({s.count_a})"
            b = "—" if s.b is None else f"{s.b:.1f}% ({s.count_b})"
            delta = "—" if s.delta is None else f"{s.delta:+.1f}"
            out.append(f"| `{s.mode}` | {s.kind} | {a} | {b} | {delta} |")
    out += _render_intensity(cmp)
    out += render_phase(cmp.phase)
    out += plots_section(plots)
    return "\n".join(out).rstrip() + "\n"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}%"


def _render_intensity(cmp: Comparison) -> list[str]:
    out = ["", "## Quantifier intensity", ""]
    if not cmp.intensity:
        return out + ["Neither run carries quantifier telemetry."]
    out += [
        f"Questions per rung (share of classified questions). A rung whose share moved by more "
        f"than {DRIFT_POINTS:g} points is flagged DRIFT: the classifier, or the question set, "
        "changed under the comparison.",
        "",
    ]
    rows = [
        [
            s.rung,
            f"{s.count_a} ({_pct(s.share_a)})",
            f"{s.count_b} ({_pct(s.share_b)})",
            "—" if s.delta is None else f"{s.delta:+.1f}",
            "DRIFT" if s.drifted else "",
        ]
        for s in cmp.intensity
    ]
    out += md_table(["rung", "A", "B", "Δ pp", "drift"], rows)
    if cmp.rung_changes:
        out += ["", f"{len(cmp.rung_changes)} shared question(s) changed rung:", ""]
        changes = [[c.question, f"`{c.question_id}`", c.rung_a, c.rung_b] for c in cmp.rung_changes]
        out += md_table(["question", "id", "A", "B"], changes)
    else:
        out += ["", "No shared question changed rung."]
    return out
