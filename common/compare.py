"""A/B comparison of two runs: per mode and metric, is the delta signal or noise?

A delta is ``signal`` only when both hold: it clears the floor (``|Δ| ≥
floor``, 5 points by default: smaller effects are not worth acting on even
when real) and its 95% interval excludes zero (it is unlikely to be chance at
this n). Anything else is ``noise``.

The interval is paired by question when the runs share at least two
questions: per question, the B rate minus the A rate; a t interval over those
per-question deltas, centred on the pooled delta. Pairing removes the
between-question spread (some questions are always STRICT, some never), which
dominates a sweep's variance. Runs without shared questions fall back to
Newcombe's interval for two independent proportions (Welch's for the mean
ratio). Rates are in points (percent); the mean ratio's delta is in points of
ratio × 100.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from common.models import Manifest
from common.report import plots_section
from common.runstats import RunStats, Tally
from common.stats import newcombe_interval, paired_interval, welch_interval

DEFAULT_FLOOR = 5.0
Verdict = Literal["signal", "noise", "n/a"]


@dataclass(frozen=True)
class Metric:
    key: str  # a ``Tally.proportion`` metric, or "ratio"
    label: str
    higher_is_better: bool

    @property
    def is_rate(self) -> bool:
        return self.key != "ratio"


METRICS: tuple[Metric, ...] = (
    Metric("strict", "strict-rate", True),
    Metric("ungrounded", "UNGROUNDED rate", False),
    Metric("ratio", "mean ratio", True),
    Metric("format_collapsed", "FORMAT_COLLAPSED rate", False),
    Metric("no_evidence_pointer", "NO_EVIDENCE_POINTER rate", False),
    Metric("accuracy", "answer accuracy", True),
    Metric("recall", "retrieval recall", True),
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
    verdict: Verdict
    effect: str  # "better" / "worse" for a signal, else "—"


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


@dataclass
class Comparison:
    run_a: str
    run_b: str
    floor: float
    manifest_a: Manifest
    manifest_b: Manifest
    rows_a: int
    rows_b: int
    deltas: list[MetricDelta] = field(default_factory=list)
    kind_shifts: list[KindShift] = field(default_factory=list)
    policy_changes: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    mixed: list[str] = field(default_factory=list)

    @property
    def signals(self) -> list[MetricDelta]:
        return [d for d in self.deltas if d.verdict == "signal"]


def classify_delta(delta: float, low: float, high: float, floor: float = DEFAULT_FLOOR) -> Verdict:
    """``signal`` when |delta| clears the floor and the interval excludes zero, else ``noise``."""
    if any(math.isnan(x) for x in (delta, low, high)):
        return "n/a"
    excludes_zero = low > 0 or high < 0
    return "signal" if abs(delta) >= floor and excludes_zero else "noise"


def _cell_value(cell: Tally, metric: Metric) -> tuple[float, float, int] | None:
    """(numerator, denominator-weighted value, n) of a metric in one cell; None when n is 0."""
    if metric.is_rate:
        k, n = cell.proportion(metric.key)
        return (k, k / n, n) if n else None
    if cell.ratio.n == 0:
        return None
    return (cell.ratio.total, cell.ratio.total / cell.ratio.n, cell.ratio.n)


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
    ta = stats_a.modes[mode].tally if mode in stats_a.modes else Tally()
    tb = stats_b.modes[mode].tally if mode in stats_b.modes else Tally()
    if metric.is_rate:
        (ka, na), (kb, nb) = ta.proportion(metric.key), tb.proportion(metric.key)
        a = ka / na if na else math.nan
        b = kb / nb if nb else math.nan
        return a, b, na, nb, newcombe_interval(ka, na, kb, nb), "Newcombe (unpaired)"
    a = ta.ratio.mean if ta.ratio.mean is not None else math.nan
    b = tb.ratio.mean if tb.ratio.mean is not None else math.nan
    return a, b, ta.ratio.n, tb.ratio.n, welch_interval(ta.ratio, tb.ratio), "Welch (unpaired)"


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
    if not n_a or not n_b or math.isnan(a) or math.isnan(b):
        return MetricDelta(
            mode, metric, None, None, n_a, n_b, None, None, None, "no data", "n/a", "—"
        )
    delta, low_pp, high_pp = 100 * (b - a), 100 * low, 100 * high
    verdict = classify_delta(delta, low_pp, high_pp, floor)
    effect = "—"
    if verdict == "signal":
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
    )
    for mode in modes:
        for metric in METRICS:
            cmp.deltas.append(
                compare_metric(stats_a, stats_b, mode, metric, floor=floor, shared=shared)
            )
    cmp.kind_shifts = _kind_shifts(stats_a, stats_b, modes)
    cmp.policy_changes = _policy_changes(ma, mb)
    cmp.warnings = _provenance_warnings(ma, mb, len(shared), stats_a.rows, stats_b.rows)
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
    return cmp


# --------------------------------------------------------------------------- rendering


def _fmt_value(d: MetricDelta, value: float | None) -> str:
    if value is None:
        return "—"
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
        f"Δ = B − A in points. `signal` needs |Δ| ≥ {cmp.floor:g} points and a 95% interval "
        "excluding zero; otherwise `noise`.",
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
    out += plots_section(plots)
    return "\n".join(out).rstrip() + "\n"
