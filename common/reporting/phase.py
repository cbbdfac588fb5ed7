"""Quantifier phase decisions: which guard switch to turn on, read from compared runs.

The rules: docs/grounding.md, 'Comparing runs: intensity drift, claim count, phase decisions'.
Each switch is decided on the signals that say whether it
does its job, every one a ``MetricDelta`` of ``qfarm.common.reporting.compare`` (|Δ| at least
the floor *and* a 95% interval excluding zero), oriented as (on) − (off):

* caps (``quantifier_guard_apply_caps``), judged on what the answers did, so
  they cannot vote for themselves: **turn on** when the claim count per answer
  moves (either way), or the strict-rate without the guard's own demotions
  rises, or the UNGROUNDED rate falls; those two moving the other way **hurt**.
  The guard's demotions (strict-rate as labelled) are shown apart, never deciding.
* reminder (``quantifier_reminder_enabled``): **turn on** when the
  FORMAT_COLLAPSED or the NO_EVIDENCE_POINTER rate drops; either rising, or
  strict-rate falling, **hurts**.
* any other phase switch (guard, reject-broad, allow-broad): strict-rate, as
  the headline rate: a gain helps, a loss hurts.

Per mode, every rule: helped and hurt nowhere is **turn on**; hurt and helped
nowhere is **keep off**; both (in one mode or in two) is **mixed**, with the
modes named: a change that hurts a mode by the floor is no green light. A cell
decides when its point estimate clears the floor (the design's rule); its 95%
interval is printed beside it, and when the interval still includes zero, how
many questions would settle it.

Runs differing in several phase switches, all on in the same run, get one
decision for the switches together: the union of their signals. The four runs
of an A/B/D cycle (both off, caps only, reminder only, both) get
``decide_cycle``: caps and the reminder each against the baseline, and both
together against each alone; both are adopted only when together they beat
each alone (the reminder's signals from caps-only to both, the caps' signals
from reminder-only to both).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from qfarm.common.errors import InputError

DEFAULT_FLOOR = 5.0  # points; compare's floor (``qfarm.common.reporting.compare`` imports this module)

if TYPE_CHECKING:
    from qfarm.common.models import Manifest
    from qfarm.common.reporting.compare import Comparison, MetricDelta
    from qfarm.common.reporting.runstats import RunStats

CAPS = "quantifier_guard_apply_caps"
REMINDER = "quantifier_reminder_enabled"
# Policy switches that turn one phase of the quantifier guard on or off.
QUANTIFIER_PHASE_SWITCHES: tuple[str, ...] = (
    "quantifier_guard_enabled",
    CAPS,
    REMINDER,
    "quantifier_reject_broad",
    "allow_broad",
)
Decision = Literal["turn on", "keep off", "mixed", "no signal"]
Direction = Literal["any", "down", "up"]


@dataclass(frozen=True)
class Rule:
    """Which metrics decide a switch, and which way each must move to count."""

    name: str
    turn_on: tuple[tuple[str, Direction], ...]  # (metric key, direction of a signal that helps)
    keep_off: tuple[tuple[str, Direction], ...]  # (metric key, direction of a signal that hurts)
    text: str
    shown: tuple[str, ...] = ()  # metrics printed beside the decision, never deciding


RULES: dict[str, Rule] = {
    CAPS: Rule(
        "caps",
        (("claims", "any"), ("answered_strict", "up"), ("ungrounded", "down")),
        (("answered_strict", "down"), ("ungrounded", "up")),
        "claims per answer move by the floor (either way), or the strict-rate without the "
        "guard's own demotions rises or UNGROUNDED falls (the other way hurts)",
        ("strict", "hybrid"),
    ),
    REMINDER: Rule(
        "reminder",
        (("format_collapsed", "down"), ("no_evidence_pointer", "down")),
        (("format_collapsed", "up"), ("no_evidence_pointer", "up"), ("strict", "down")),
        "the FORMAT_COLLAPSED or NO_EVIDENCE_POINTER rate drops by the floor (either rising, "
        "or strict-rate falling, hurts)",
    ),
}
STRICT_RULE = Rule(
    "strict-rate",
    (("strict", "up"),),
    (("strict", "down"),),
    "strict-rate rises by the floor in some mode and falls in none",
)


@dataclass(frozen=True)
class Signal:
    """One (mode, metric) cell a decision read, oriented as (switch on) − (switch off)."""

    mode: str
    metric: str  # the metric's label
    key: str
    delta: float | None  # points; claims: percent of the off run's mean
    low: float | None
    high: float | None
    n: int
    verdict: str  # signal / noise / n/a
    role: str = ""  # "turn on" or "keep off" when this cell decided, else ""
    questions: int = 0  # questions of the paired interval (0: unpaired, ``n`` rows)

    def settle(self) -> str:
        """How many questions would put the interval off zero at this effect and spread."""
        if self.delta is None or self.low is None or self.high is None or not self.delta:
            return ""
        if self.low > 0 or self.high < 0:
            return "interval excludes zero"
        half = (self.high - self.low) / 2
        have = self.questions or self.n
        need = math.ceil(have * (half / abs(self.delta)) ** 2)
        unit = "questions" if self.questions else "rows"
        return f"interval includes zero; about {need} {unit} would settle it (have {have})"

    def text(self) -> str:
        if self.delta is None or self.low is None or self.high is None:
            return f"`{self.mode}` {self.metric} no data"
        unit = "%" if self.key == "claims" else " pp"
        return (
            f"`{self.mode}` {self.metric} {self.delta:+.1f}{unit} "
            f"(95% CI [{self.low:+.1f}, {self.high:+.1f}], n={self.n}, {self.settle()})"
        )


@dataclass(frozen=True)
class PhaseDecision:
    """What the decision tree says about one switch (or several flipped together)."""

    switches: tuple[str, ...]
    on_in: str  # "A" or "B" (a cycle step: the run's id): the run with the switch(es) on
    decision: Decision
    rule: str  # the rule's own words
    signals: tuple[Signal, ...]  # every cell read; the deciding ones carry a role
    note: str = ""

    @property
    def switch(self) -> str:
        return " + ".join(self.switches)

    @property
    def decided_by(self) -> tuple[Signal, ...]:
        return tuple(s for s in self.signals if s.role)

    def modes_where(self, role: str) -> list[str]:
        return list(dict.fromkeys(s.mode for s in self.signals if s.role == role))


def _matches(delta: float, direction: Direction) -> bool:
    return direction == "any" or (delta < 0) == (direction == "down")


def _oriented(d: MetricDelta, sign: float) -> Signal:
    if d.delta is None or d.low is None or d.high is None:
        return Signal(d.mode, d.metric.label, d.metric.key, None, None, None,
                      min(d.n_a, d.n_b), str(d.verdict), questions=d.questions)
    low, high = sorted((sign * d.low, sign * d.high))
    return Signal(d.mode, d.metric.label, d.metric.key, sign * d.delta, low, high,
                  min(d.n_a, d.n_b), str(d.verdict), questions=d.questions)


def decide(
    deltas: Sequence[MetricDelta],
    switches: Sequence[str],
    on_in_b: bool,
    note: str = "",
    *,
    floor: float = DEFAULT_FLOOR,
) -> PhaseDecision:
    """Apply the switches' rules (their union) to a comparison's deltas.

    A cell decides when its point estimate clears ``floor``: the design's rule. Its
    interval is reported beside it (``Signal.settle``), not asked to exclude zero.
    """
    rules = [RULES.get(s, STRICT_RULE) for s in switches]
    deciding = {key for r in rules for key, _ in (*r.turn_on, *r.keep_off)}
    wanted = deciding | {key for r in rules for key in r.shown}
    sign = 1.0 if on_in_b else -1.0
    signals: list[Signal] = []
    helps = hurts = False
    for d in deltas:
        if d.metric.key not in wanted:
            continue
        s = _oriented(d, sign)
        role = ""
        if s.key in deciding and s.delta is not None and abs(s.delta) >= floor:
            if any(k == s.key and _matches(s.delta, way) for r in rules for k, way in r.keep_off):
                role, hurts = "keep off", True
            elif any(k == s.key and _matches(s.delta, way) for r in rules for k, way in r.turn_on):
                role, helps = "turn on", True
        signals.append(replace(s, role=role))
    decision: Decision = (
        "mixed" if helps and hurts else "keep off" if hurts else "turn on" if helps else "no signal"
    )
    text = "; ".join(f"{r.name}: {r.text}" for r in rules)
    return PhaseDecision(tuple(switches), "B" if on_in_b else "A", decision, text,
                         tuple(signals), note)


def dry_run_note(policy_a: Any, policy_b: Any, switches: Sequence[str]) -> str:
    """Why a guard on/off pair with caps off in both cannot move a verdict."""
    caps_off = not policy_a.quantifier_guard_apply_caps and not policy_b.quantifier_guard_apply_caps
    if "quantifier_guard_enabled" in switches and caps_off:
        return ("Caps are off in both runs, so the guard only observes (its dry run): it "
                "cannot move a verdict, and `no signal` is expected. Its would-fire kinds are "
                "in each run's summary.md.")
    return ""


def caps_note(cmp: Comparison, phase: PhaseDecision, off_is_a: bool) -> str:
    """The guard's own demotions, shown apart from what decided caps.

    Per mode, strict-rate as labelled (the guard's CAP_APPLIED and SCOPE_UNBOUND
    demotes included) beside the strict-rate without them, and the share the
    caps-off run's dry run predicted it would demote.
    """
    if CAPS not in phase.switches:
        return ""
    by_cell = {(s.mode, s.key): s for s in phase.signals if s.delta is not None}
    parts = []
    for (mode, key), labelled in by_cell.items():
        answered = by_cell.get((mode, "answered_strict"))
        if key != "strict" or answered is None or labelled.delta is None or answered.delta is None:
            continue
        if abs(labelled.delta - answered.delta) < 0.05:
            continue
        share = cmp.would_demote.get(mode, (None, None))[0 if off_is_a else 1]
        predicted = f", {share:.1f}% predicted by the dry run" if share is not None else ""
        parts.append(f"`{mode}` strict-rate {labelled.delta:+.1f} pp as labelled, "
                     f"{answered.delta:+.1f} pp without them{predicted}")  # fmt: skip
    if not parts:
        return ""
    return ("The guard's own demotions (CAP_APPLIED, SCOPE_UNBOUND), shown apart and not "
            "deciding: " + "; ".join(parts) + ".")  # fmt: skip


def phase_decision(cmp: Comparison) -> PhaseDecision | None:
    """The decision for a pair, or None (with a note on ``cmp``) when it cannot be attributed."""
    if not cmp.policy_changes:
        return None
    phase = {k: v for k, v in cmp.policy_changes.items() if k in QUANTIFIER_PHASE_SWITCHES}
    if not phase:
        return None
    others = sorted(set(cmp.policy_changes) - set(phase))
    if others:
        cmp.notes.append(
            "No phase decision: besides " + ", ".join(f"`{k}`" for k in phase)
            + " the policies differ in " + ", ".join(f"`{k}`" for k in others)
            + ", so an effect cannot be put on the phase switch."
        )
        return None
    if not all(isinstance(vb, bool) for _, vb in phase.values()):
        return None
    on_in = {vb for _, vb in phase.values()}
    if len(on_in) != 1:
        cmp.notes.append(
            "No phase decision: " + ", ".join(f"`{k}` is on in {'B' if vb else 'A'}"
                                              for k, (_, vb) in phase.items())
            + "; with no run that has neither, the runs cannot tell which switch did what. "
            "Give the four runs of the cycle (neither, caps only, reminder only, both)."
        )
        return None
    switches = tuple(phase)
    on_in_b = on_in.pop()
    decision = decide(cmp.deltas, switches, on_in_b, floor=cmp.floor)
    note = dry_run_note(cmp.manifest_a.policy, cmp.manifest_b.policy, switches)
    return replace(decision, note=" ".join(filter(None, (note, caps_note(cmp, decision, on_in_b)))))


def phase_line(phase: PhaseDecision) -> str:
    """The decision in one sentence: the rule, what decided it, with its interval."""
    where = f"on in run {phase.on_in}"
    head = f"`{phase.switch}` ({where}): **{phase.decision}**"
    if phase.decision == "mixed":
        helped = ", ".join(f"`{m}`" for m in phase.modes_where("turn on"))
        hurt = ", ".join(f"`{m}`" for m in phase.modes_where("keep off"))
        head += f" (helps {helped}; hurts {hurt})"
    if phase.decided_by:
        return head + ", decided by " + "; ".join(s.text() for s in phase.decided_by) + "."
    return head + f". No signal clears the rule ({phase.rule})."


# --------------------------------------------------------------------------- the A/B/D cycle

Outcome = Literal["both", "caps only", "reminder only", "either alone", "neither"]
CYCLE_ROLES = ("baseline", "caps only", "reminder only", "both")


@dataclass(frozen=True)
class CycleStep:
    question: str
    run_off: str
    run_on: str
    decision: PhaseDecision


@dataclass(frozen=True)
class CycleDecision:
    runs: dict[str, str]  # role -> run id
    steps: tuple[CycleStep, ...]  # caps alone, reminder alone, reminder on top, caps on top
    outcome: Outcome
    why: str
    warnings: tuple[str, ...] = ()
    advice: str = ""  # the tree's last branch, when failures stay high with both on


def cycle_roles(manifests: Sequence[Manifest]) -> dict[str, int]:
    """Which of four runs is the baseline, caps only, reminder only and both (by index)."""
    roles: dict[str, int] = {}
    for i, man in enumerate(manifests):
        role = CYCLE_ROLES[int(man.policy.quantifier_guard_apply_caps)
                           + 2 * int(man.policy.quantifier_reminder_enabled)]
        if role in roles:
            raise InputError(
                f"runs `{manifests[roles[role]].run_id}` and `{man.run_id}` are both "
                f"'{role}' ({CAPS}={man.policy.quantifier_guard_apply_caps}, "
                f"{REMINDER}={man.policy.quantifier_reminder_enabled}); an A/B/D cycle needs one "
                "run each of neither, caps only, reminder only and both"
            )
        roles[role] = i
    base = manifests[0].policy.model_dump(mode="json", exclude={CAPS, REMINDER})
    for man in manifests[1:]:
        other = man.policy.model_dump(mode="json", exclude={CAPS, REMINDER})
        differ = sorted(k for k in base if base[k] != other.get(k))
        if differ:
            raise InputError(
                f"run `{man.run_id}` differs from `{manifests[0].run_id}` in "
                + ", ".join(differ)
                + f"; the four runs of a cycle may differ only in {CAPS} and {REMINDER}"
            )
    return roles


def decide_cycle(
    runs: Sequence[tuple[Manifest, RunStats]], *, floor: float
) -> CycleDecision:
    """Caps, reminder, and both together against each alone, over the four runs of a cycle."""
    from qfarm.common.reporting.compare import compare_runs  # compare imports this module

    if len(runs) != 4:
        raise InputError(f"an A/B/D cycle is four runs, got {len(runs)}")
    roles = cycle_roles([m for m, _ in runs])
    by_role = {role: runs[i] for role, i in roles.items()}
    plan = (
        ("caps alone", "baseline", "caps only", (CAPS,)),
        ("reminder alone", "baseline", "reminder only", (REMINDER,)),
        ("both over caps only", "caps only", "both", (REMINDER,)),
        ("both over reminder only", "reminder only", "both", (CAPS,)),
    )
    steps = []
    warnings: list[str] = []
    advice = ""
    for question, off, on, switches in plan:
        (man_off, st_off), (man_on, st_on) = by_role[off], by_role[on]
        cmp = compare_runs(man_off, st_off, man_on, st_on, floor=floor)
        warnings += [f"{off} → {on}: {w}" for w in cmp.warnings]
        decision = decide(cmp.deltas, switches, on_in_b=True, floor=floor)
        if on == "both" and off == "caps only":
            advice = last_branch(cmp.deltas)
        decision = replace(decision, on_in=f"`{man_on.run_id}`",
                           note=caps_note(cmp, decision, off_is_a=True))
        steps.append(CycleStep(question, man_off.run_id, man_on.run_id, decision))
    caps, reminder, over_caps, over_reminder = (s.decision.decision == "turn on" for s in steps)
    outcome: Outcome
    if over_caps and over_reminder:
        outcome, why = "both", "together they beat caps alone and the reminder alone"
    elif caps and reminder:
        if over_caps:
            outcome, why = "reminder only", "adding caps to the reminder changes nothing"
        elif over_reminder:
            outcome, why = "caps only", "adding the reminder to caps changes nothing"
        else:
            outcome, why = ("either alone", "each helps alone; together they beat neither")
    elif caps:
        outcome, why = "caps only", "only caps decided against the baseline"
    elif reminder:
        outcome, why = "reminder only", "only the reminder decided against the baseline"
    else:
        outcome, why = "neither", "no step cleared its rule"
    if steps[1].decision.decision in ("keep off", "mixed") and outcome in ("both", "reminder only"):
        outcome, why = "caps only" if caps else "neither", "the reminder alone hurts a mode"
    run_ids = {role: by_role[role][0].run_id for role in CYCLE_ROLES}
    return CycleDecision(run_ids, tuple(steps), outcome, why, tuple(dict.fromkeys(warnings)),
                         advice)


# The share of failing answers (UNGROUNDED, FORMAT_COLLAPSED or NO_EVIDENCE_POINTER) in
# a mode, with caps and the reminder both on, above which the tree's last branch applies.
FAILURES_STAY_HIGH_PCT = 20.0
_FAILURE_KEYS = ("ungrounded", "format_collapsed", "no_evidence_pointer")


def last_branch(deltas: Sequence[MetricDelta]) -> str:
    """The design's last branch: failures still high with both switches on → reject-broad."""
    high = [
        f"`{d.mode}` {d.metric.label} {d.b:.1f}%"
        for d in deltas
        if d.metric.key in _FAILURE_KEYS and d.b is not None and d.b >= FAILURES_STAY_HIGH_PCT
    ]
    if not high:
        return ""
    return (
        "Failures stay high with caps and the reminder both on (" + "; ".join(high)
        + f"; at least {FAILURES_STAY_HIGH_PCT:.0f}%): the tree's last branch is `--reject-broad` "
        "(opt-in), which refuses unbounded broad questions before retrieval and the model call."
    )


def cycle_lines(cycle: CycleDecision) -> list[str]:
    """The cycle's decision and its four steps, one line each."""
    lines = [f"A/B/D cycle: **{cycle.outcome}** ({cycle.why})."]
    if cycle.advice:
        lines.append(cycle.advice)
    for step in cycle.steps:
        lines.append(f"{step.question} (`{step.run_off}` → `{step.run_on}`): "
                     + phase_line(step.decision)
                     + (f" {step.decision.note}" if step.decision.note else ""))
    return lines


def render_cycle(cycle: CycleDecision) -> str:
    """``cycle.md``: the runs, the decision and the step each rests on."""
    out = ["# qfarm compare: A/B/D cycle", ""]
    out += ["| role | run |", "|---|---|"]
    out += [f"| {role} | `{run}` |" for role, run in cycle.runs.items()]
    out += ["", "## Decision", "", f"**{cycle.outcome}**: {cycle.why}.", ""]
    if cycle.advice:
        out += [cycle.advice, ""]
    out += [
        "Both are adopted only when both together beat each alone: the reminder's signals "
        "from caps only to both, and the caps' signals from reminder only to both.",
        "",
    ]
    for step in cycle.steps:
        out += [f"### {step.question}: `{step.run_off}` → `{step.run_on}`", "",
                f"- {phase_line(step.decision)}", f"- rule: {step.decision.rule}"]
        out += [f"- {step.decision.note}", ""] if step.decision.note else [""]
        out += _signal_table(step.decision) + [""]
    if cycle.warnings:
        out += ["## Warnings", ""] + [f"- {w}" for w in cycle.warnings]
    return "\n".join(out).rstrip() + "\n"


def _signal_table(phase: PhaseDecision) -> list[str]:
    out = ["| mode | metric | Δ (on − off) | 95% CI | n | interval | decided |",
           "|---|---|---|---|---|---|---|"]
    for s in phase.signals:
        if s.delta is None:  # a mode one run has no rows for: nothing was read
            continue
        unit = "%" if s.key == "claims" else " pp"
        delta = "—" if s.delta is None else f"{s.delta:+.1f}{unit}"
        ci = "—" if s.low is None or s.high is None else f"[{s.low:+.1f}, {s.high:+.1f}]"
        out.append(f"| `{s.mode}` | {s.metric} | {delta} | {ci} | {s.n} | {s.settle()} | "
                   f"{s.role or '—'} |")
    return out


def render_phase(phase: PhaseDecision | None) -> list[str]:
    """compare.md's phase section for a pair."""
    if phase is None:
        return []
    out = ["", "## Quantifier phase decision", ""]
    out += [
        f"The runs differ in {'the phase switch' if len(phase.switches) == 1 else 'the phase switches'} "
        f"{', '.join(f'`{s}`' for s in phase.switches)}, on in run {phase.on_in}. Rule: "
        f"{phase.rule}. A cell decides when |Δ| is at least the floor (the design's rule); "
        "its 95% interval is printed beside it.",
        "",
        f"- {phase_line(phase)}",
    ]
    if phase.note:
        out.append(f"- {phase.note}")
    return out + [""] + _signal_table(phase)
