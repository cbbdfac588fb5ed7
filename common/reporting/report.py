"""The run summary (``summary.md``), rendered from a manifest and a stream of rows.

Rendering is pure: ``render_summary`` makes one streaming pass over the rows
into ``qfarm.common.reporting.runstats.RunStats`` (bounded memory: a 100k-row file renders in
a few MB) and turns it into markdown. Eager and distributed runs render the
same way because both write the same rows.

Every rate carries a 95% interval: that is how the summary says how uncertain
each rate is at this n. Wilson's when each question was asked once; clustered by
question when it was sampled n > 1 times (``stats.rate_interval``), since the
samples of one question are not independent. docs/reports.md explains every metric.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from qfarm.common import versions
from qfarm.common.models import Label, Manifest, Row
from qfarm.common.policy import Policy
from qfarm.common.reporting.cost import cost_lines, cost_notes, render_cost
from qfarm.common.reporting.runstats import (
    MAX_QUESTION_ROWS,
    STAGES,
    ModeStats,
    QuestionStats,
    RunStats,
    Tally,
    accumulate,
)
from qfarm.common.reporting.stats import (
    Cluster,
    design_effect,
    is_one_per_cluster,
    rate_interval,
    wilson_interval,
)
from qfarm.common.runstatus import status_text
from qfarm.common.text import replace_control_chars
from qfarm.common.vocab import LATTICE_MODES, RunStatus

# --------------------------------------------------------------------------- formatting


def fmt_pct(
    k: int, n: int, *, interval: bool = True, clusters: Sequence[Cluster] | None = None
) -> str:
    """``62.5% [40.9–80.0]``: the rate and its 95% interval; ``—`` when n is 0.

    With ``clusters`` (per question (k, n), see ``RunStats.clusters``) the interval is
    ``rate_interval``'s, which accounts for repeated samples; without, Wilson's.
    """
    if n == 0:
        return "—"
    text = f"{100 * k / n:.1f}%"
    if interval:
        low, high = rate_interval(clusters) if clusters is not None else wilson_interval(k, n)
        text += f" [{100 * low:.1f}–{100 * high:.1f}]"
    return text


def fmt_rate(stats: RunStats, mode: str, metric: str) -> str:
    """A mode's rate of a binary metric (``Tally.proportion``) with its clustered interval."""
    m = stats.modes.get(mode)
    k, n = m.tally.proportion(metric) if m else (0, 0)
    return fmt_pct(k, n, clusters=stats.clusters(mode, metric))


def fmt_num(x: float | None, digits: int = 0) -> str:
    return "—" if x is None else f"{x:,.{digits}f}"


def fmt_ms(x: float | None) -> str:
    """Milliseconds: one decimal under 10 ms (retrieval and verify live there), whole above."""
    if x is None:
        return "—"
    return f"{x:.1f}" if abs(x) < 10 else f"{x:,.0f}"


def fmt_time(ts: float | None) -> str:
    if ts is None:
        return "—"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def md_text(text: str) -> str:
    """Text from a question file, a row or a server, safe as markdown: control characters
    become U+FFFD and ``<``, ``>``, ``&`` entities, so a question's HTML shows as text
    instead of becoming the page's markup wherever summary.md is rendered. Code spans
    (between backticks) are left alone: markdown shows them verbatim already."""
    text = replace_control_chars(text)
    parts = text.split("`")
    # An odd number of backticks leaves one unclosed: markdown shows it as a backtick and
    # the text after it is not code, so escape everything.
    step = 2 if len(parts) % 2 else 1
    for i in range(0, len(parts), step):
        parts[i] = parts[i].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def md_code(text: str) -> str:
    """``text`` as one code span, whatever backticks it holds (the fence is longer than
    any run of them inside), with control characters replaced."""
    text = replace_control_chars(text).replace("\n", " ")
    runs = re.findall("`+", text)
    fence = "`" * (max((len(r) for r in runs), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _cell(text: str) -> str:
    return md_text(text).replace("|", "\\|").replace("\n", " ")


def md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def policy_overrides(policy: Policy) -> dict[str, Any]:
    """Fields of ``policy`` that differ from the defaults, as JSON values."""
    current, default = policy.model_dump(mode="json"), Policy().model_dump(mode="json")
    return {k: v for k, v in current.items() if default.get(k) != v}


def _output_note(policy: Policy) -> str:
    if not policy.structured_output:
        return "free text (no grammar)"
    return (f"decoded under each mode's grammar (`structured_output`, {versions.GRAMMAR_VERSION}): "
            "evidence ids of the prompt, at most the claim cap")


# --------------------------------------------------------------------------- sections


def _header(
    man: Manifest,
    stats: RunStats,
    finished_at: float | None,
    status: str | None,
    cancelled_jobs: int | None = None,
    paused_s: float = 0.0,
) -> list[str]:
    out = [f"# qfarm run `{man.run_id}`", ""]
    if man.simulated or stats.simulated_rows:
        out += [
            "> **SIMULATED.** These numbers come from the vLLM simulator (`qfarm sim`), not from "
            f"`{man.model}`: they exercise the farm, they say nothing about the model.",
            "",
        ]
    end = finished_at if finished_at is not None else stats.last_finished
    start = man.created_at
    wall = run_wall_s(man, stats, finished_at, paused_s)
    overrides = policy_overrides(man.policy)
    override_text = (
        ", ".join(f"`{k}={json.dumps(v)}`" for k, v in overrides.items()) or "none (defaults)"
    )
    endpoints = list(man.endpoints) or [e for e in stats.endpoints if e != "(none)"]
    index = man.index_version or "—"
    n_errors = stats.error_rows
    facts = [
        ("question file", f"`{man.question_file}` ({man.question_file_digest})"),
        (
            "questions × modes × n",
            f"{man.n_questions} × {len(man.modes)} × {man.n} = {man.n_jobs} jobs"
            + selection_note(man),
        ),
        ("modes", ", ".join(f"`{m}`" for m in man.modes)),
        ("rows", f"{stats.jobs} of {man.n_jobs} expected"
                 + (f" ({stats.duplicates} more lines repeat a job)" if stats.duplicates else "")
                 + (f"; {error_phrase(n_errors, stats.rows)}" if n_errors else "")),
        ("policy overrides", override_text),
        ("output", _output_note(man.policy)),
        ("verifier_policy_hash", f"`{man.verifier_policy_hash}`"),
        ("governance_policy_hash", f"`{man.governance_policy_hash}`"),
        ("model", f"`{man.model}` (profile `{man.model_profile_id}`)"),
        ("endpoints", ", ".join(f"`{e}`" for e in endpoints) or "—"),
        ("LLM", "SIMULATED (vLLM simulator)" if man.simulated
                else man.llm_server or "real endpoint(s)"),
        ("retriever", f"{man.retriever}, index `{index}`"),
        ("corpus", man.corpus or "—"),
        ("execution", "eager (in process)" if man.eager else "distributed (Celery)"),
        ("status", status_text(status, errored=n_errors, rows=stats.rows) if status else "—"),
        ("started", fmt_time(start)),
        ("finished", fmt_time(end)),
        ("wall time", "—" if wall is None else f"{wall:.1f} s" + (
            f" ({paused_s:.1f} s between an interrupt and its resume left out)"
            if paused_s > 0 else "")),
        ("throughput", "—" if not wall or wall <= 0 else f"{stats.rows / wall:.2f} jobs/s"),
        ("result cache hits", str(stats.cache_hits)),
        *([("response cache", response_cache_text(stats))] if man.response_cache else []),
    ]
    out += md_table(["run", ""], [[k, v] for k, v in facts])
    out += run_warnings(man, stats, status, cancelled_jobs)
    return out


def response_cache_text(stats: RunStats) -> str:
    """The header's line for a run with ``--cache``: replies it served, and what they saved."""
    return (f"on (--cache): {stats.response_cache_hits} of {stats.response_cache_asked} model "
            f"replies from the cache, {stats.model_ms_saved / 1000.0:,.1f} s of model time saved")


def run_wall_s(man: Manifest, stats: RunStats, finished_at: float | None,
               paused_s: float = 0.0) -> float | None:
    """The run's wall time: from its manifest to its end (or its last row so far), less
    ``paused_s``, the time it stood between interrupts and their resumes."""
    end = finished_at if finished_at is not None else stats.last_finished
    if end is None:
        return None
    return max(end - man.created_at - paused_s, 0.0)


def _cost(man: Manifest, stats: RunStats, modes: list[str], finished_at: float | None,
          paused: float = 0.0) -> list[str]:
    lines = cost_lines(stats.cost, man.cost_rates, run_wall_s(man, stats, finished_at, paused),
                       modes)
    return render_cost(lines, man.cost_rates, cost_notes(stats.cost),
                       simulated=man.simulated or stats.simulated_rows > 0)


def run_warnings(
    man: Manifest, stats: RunStats, status: str | None = None, cancelled_jobs: int | None = None
) -> list[str]:
    notes: list[str] = []
    if status == RunStatus.CANCELLED and stats.rows < man.n_jobs:
        notes.append(
            f"Run cancelled: {man.n_jobs - stats.rows} of {man.n_jobs} jobs were cancelled "
            "before they had a row (left out of every rate)."
        )
        if cancelled_jobs is not None:
            unaccounted = man.n_jobs - stats.rows - cancelled_jobs
            notes.append(
                f"The farm counted {cancelled_jobs} cancelled jobs (purged from a queue, "
                "skipped at a stage or stopped inside a taken bundle)"
                + (f"; {unaccounted} more have neither a row nor a count (lost, or still "
                   "running when the summary was written)." if unaccounted > 0 else
                   ": rows + cancelled = planned." if unaccounted == 0 else
                   f"; {-unaccounted} of them also have a row (a row that landed after its "
                   "job was counted).")
            )
    elif stats.jobs < man.n_jobs:
        notes.append(
            f"{man.n_jobs - stats.jobs} of {man.n_jobs} jobs have no row "
            "(run still going, cancelled or lost)."
        )
    if stats.duplicates:
        notes.append(f"rows.jsonl holds {stats.duplicates} rows for jobs that already have one: "
                     "the file is not the one the farm wrote (`qfarm verify` checks it).")
    if stats.jobs > man.n_jobs:
        notes.append(f"{stats.jobs} jobs have rows, {man.n_jobs} were planned: rows.jsonl holds "
                     "extra rows.")
    over = sum(1 for q in stats.questions.values() for c in q.cells.values() if c.rows > man.n)
    if over:
        notes.append(
            f"{over} question × mode cells have more than n={man.n} rows (duplicate jobs?)."
        )
    if stats.unreadable:
        lines = ", ".join(map(str, stats.unreadable_lines))
        notes.append(f"{stats.unreadable} unreadable line(s) in rows.jsonl skipped (line {lines}).")
    for label, counter, expected in (
        ("verifier_policy_hash", stats.verifier_hashes, man.verifier_policy_hash),
        ("governance_policy_hash", stats.governance_hashes, man.governance_policy_hash),
        ("model", stats.models, man.model),
    ):
        foreign = sum(c for h, c in counter.items() if h != expected)
        if foreign:
            notes.append(f"{foreign} rows carry a {label} other than the manifest's `{expected}`.")
    if not man.simulated and stats.simulated_rows:
        notes.append(f"{stats.simulated_rows} rows were answered by the simulator.")
    if not notes:
        return []
    return ["", "**Warnings**", ""] + [f"- {n}" for n in notes]


def _uncertainty_note(stats: RunStats, modes: list[str]) -> str:
    ns = [
        (stats.modes[m].tally.valid, m)
        for m in modes
        if m in stats.modes and stats.modes[m].tally.valid
    ]
    if not ns:
        return "No row reached a verdict."
    n, mode = min(ns)
    clusters = stats.clusters(mode, "strict")
    if is_one_per_cluster(clusters):
        low, high = wilson_interval(n // 2, n)
        return (
            f"Rates carry 95% Wilson intervals in brackets. With {n} verdicts per mode, a rate "
            f"near 50% is known to within ±{100 * (high - low) / 2:.1f} points; two runs' "
            "rates need a wider gap than that to differ (see `qfarm compare`)."
        )
    questions = sum(1 for _, c in clusters if c)
    deff = design_effect(clusters)
    n_eff = n / max(deff, 1.0) if deff is not None else float(questions)
    low, high = wilson_interval(round(n_eff) // 2, max(round(n_eff), 1))
    why = (
        f"the `{mode}` strict-rate's design effect is {deff:.2f}"
        if deff is not None
        else "every verdict agrees, so each question counts once"
    )
    return (
        f"Rates carry 95% intervals in brackets, clustered by question: the {n} verdicts of "
        f"`{mode}` come from {questions} questions sampled repeatedly, and samples of one "
        f"question are not independent ({why}: they weigh like {n_eff:.0f} independent "
        f"verdicts). A rate near 50% is known to within about ±{100 * (high - low) / 2:.1f} "
        "points; two runs' rates need a wider gap than that to differ (see `qfarm compare`)."
    )


# The headline rate is over the jobs, an error row counting as a failure; the rate over the
# rows that reached a verdict stands beside it, named as such.
STRICT_OF_JOBS = "strict-rate (of jobs; errors fail)"
STRICT_OF_ANSWERED = "strict-rate (of answered)"
ERROR_RATE = "error rate (of jobs)"
DENOMINATORS_NOTE = (
    "Denominators: \"of jobs\" is every job of the mode with a row (every planned job once "
    "the run is complete), an error row counting as a failure; \"of answered\" is the rows "
    "that reached a verdict (jobs minus errors). The shares in the tables below are of "
    "answered rows."
)


def error_phrase(errored: int, rows: int) -> str:
    """``55 of 180 rows are errors (30.6 %)``, or "" when none is."""
    if not errored or rows <= 0:
        return ""
    return f"{errored} of {rows} rows are errors ({100 * errored / rows:.1f} %)"


def _mode_table(stats: RunStats, modes: list[str]) -> list[str]:
    header = [
        "mode", "jobs", "S", "H", "U", "errors", STRICT_OF_JOBS, ERROR_RATE, STRICT_OF_ANSWERED,
        "UNGROUNDED rate (of answered)", "mean ratio (of answered)", "p50 ms", "p95 ms",
        "prompt tok/job", "completion tok/job",
    ]  # fmt: skip
    rows = []
    for mode in modes:
        m = stats.modes.get(mode) or ModeStats()
        t = m.tally
        rows.append(
            [
                f"`{mode}`",
                str(t.rows),
                str(t.strict),
                str(t.hybrid),
                str(t.ungrounded),
                str(t.errors),
                fmt_rate(stats, mode, "strict_of_jobs"),
                fmt_rate(stats, mode, "errors"),
                fmt_rate(stats, mode, "strict"),
                fmt_rate(stats, mode, "ungrounded"),
                fmt_num(t.ratio.mean, 3),
                fmt_ms(m.latency.quantile(0.5)),
                fmt_ms(m.latency.quantile(0.95)),
                fmt_num(m.prompt_tokens.mean, 1),
                fmt_num(m.completion_tokens.mean, 1),
            ]
        )
    out = ["", "## Verdicts by mode", ""] + md_table(header, rows)
    out += ["", DENOMINATORS_NOTE]
    out += ["", _uncertainty_note(stats, modes)]
    if any(stats.modes[m].latency.relative_error for m in modes if m in stats.modes):
        out.append("Latency percentiles come from a bounded sketch (within 1% of a true value).")
    return out


def _kinds_table(stats: RunStats, modes: list[str]) -> list[str]:
    kinds = sorted(stats.kinds_seen)
    header = [
        "mode", "FORMAT_COLLAPSED rate", "mean raw brackets", "mean ids cited",
        "mean bracketed chars", *kinds,
    ]  # fmt: skip
    rows = []
    for mode in modes:
        m = stats.modes.get(mode) or ModeStats()
        t = m.tally
        lattice = mode in LATTICE_MODES
        brackets = fmt_num(m.brackets.mean, 2) if lattice else "—"
        pointers = fmt_num(m.pointers.mean, 2) if lattice else "—"
        chars = fmt_num(m.bracket_chars.mean, 1) if lattice else "—"
        cells = [
            f"{m.kinds[k]} ({fmt_pct(m.kinds[k], t.valid, interval=False)})" if t.valid else "—"
            for k in kinds
        ]
        rows.append(
            [f"`{mode}`", fmt_rate(stats, mode, "format_collapsed"), brackets, pointers, chars,
             *cells]
        )
    out = ["", "## Format collapse and violation kinds", ""]
    out.append("Each kind: rows carrying it (share of rows with a verdict).")
    return out + [""] + md_table(header, rows)


LABEL_ORDER: tuple[Label, ...] = (
    Label.EVIDENCE_WARRANTED,
    Label.ANCHOR_WARRANTED,
    Label.POINTER_LINKED,
    Label.BROAD_CAPPED,
    Label.EXPLORATORY,
    Label.BROAD_REJECTED,
    Label.UNGROUNDED,
)


def _label_table(stats: RunStats, modes: list[str]) -> list[str]:
    out = ["", "## Labels by mode", ""]
    out.append(
        "Rows per audit label (share of rows with a verdict). BROAD-CAPPED rows are broad "
        "answers trimmed to a profile cap: a bounded sample, never counted as EVIDENCE-WARRANTED."
    )
    names = [label.value for label in LABEL_ORDER]
    names += sorted({k for m in stats.modes.values() for k in m.labels} - set(names))
    rows = []
    for mode in modes:
        m = stats.modes.get(mode) or ModeStats()
        valid = m.tally.valid
        rows.append(
            [
                f"`{mode}`",
                *(
                    f"{m.labels[n]} ({fmt_pct(m.labels[n], valid, interval=False)})"
                    if valid
                    else "—"
                    for n in names
                ),
            ]
        )
    return out + [""] + md_table(["mode", *names], rows)


def _dry_run_table(man: Manifest, stats: RunStats, modes: list[str]) -> list[str]:
    """Guard on, caps off: the BROAD_QUANTIFIER_* kinds the guard recorded without acting."""
    policy = man.policy
    if not policy.quantifier_guard_enabled or policy.quantifier_guard_apply_caps:
        return []
    out = ["", "## Quantifier guard dry run", ""]
    out.append(
        "Caps are off, so the guard only observes: the kinds below are what it would have "
        "fired (each row's `would_fire_kinds`); no verdict, label, kind or rate above counts "
        "them. \"STRICT it would demote\" is the STRICT rows carrying a kind that soft-demotes "
        "once caps are applied (CAP_APPLIED, SCOPE_UNBOUND): the strict-rate "
        "`--apply-quantifier-caps` would cost on these same answers (in the lattice modes)."
    )
    kinds = sorted(stats.would_fire_seen)
    if not kinds:
        return out + ["", "No row would have fired a broad-quantifier kind."]
    rows = []
    for mode in modes:
        m = stats.modes.get(mode) or ModeStats()
        valid = m.tally.valid
        cells = [
            f"{m.would_fire[k]} ({fmt_pct(m.would_fire[k], valid, interval=False)})" if valid else "—"
            for k in kinds
        ]
        demote = fmt_pct(m.would_demote_strict, valid, interval=False) if valid else "—"
        guarded = "yes" if mode in policy.quantifier_guard_modes else "no"
        rows.append([f"`{mode}`", guarded, *cells, f"{m.would_demote_strict} ({demote})"])
    header = ["mode", "guarded", *kinds, "STRICT it would demote"]
    return out + [""] + md_table(header, rows)


def _reject_broad_table(man: Manifest, stats: RunStats, modes: list[str]) -> list[str]:
    """With reject-broad on: the share of bounded questions it refused, per mode."""
    if not man.policy.quantifier_reject_broad:
        return []
    out = ["", "## Reject-broad false positives", ""]
    out.append(
        'Rows whose question file marks the question `"scope": "bounded"` (a finite, known '
        "set such as the members of a band), and the share reject-broad refused: every one of "
        "them is a false positive. `bench/questions/bounded_universal.jsonl` is such a set."
    )
    rows = []
    for mode in modes:
        m = stats.modes.get(mode) or ModeStats()
        rate = (
            fmt_rate(stats, mode, "bounded_rejected") if m.bounded_n else "— (no bounded rows)"
        )
        rows.append([f"`{mode}`", str(m.bounded_n), str(m.bounded_rejected), rate])
    header = ["mode", "bounded rows", "rejected", "reject-broad false-positive rate"]
    return out + [""] + md_table(header, rows)


GOLD_COLUMNS = ["answer accuracy", "retrieval recall", "MRR", "article hit"]


def gold_cells(t: Tally, stats: RunStats | None = None, mode: str | None = None) -> list[str]:
    """One mode's gold figures, in the order of ``GOLD_COLUMNS``; given the run's ``stats``
    and the ``mode``, the rates' intervals are clustered by question."""

    def clusters(metric: str) -> list[Cluster] | None:
        return stats.clusters(mode, metric) if stats is not None and mode is not None else None

    return [
        fmt_pct(t.gold_hits, t.gold_n, clusters=clusters("accuracy")),
        fmt_pct(t.recall_hits, t.recall_n, clusters=clusters("recall")),
        f"{t.reciprocal_rank / t.recall_n:.3f}" if t.recall_n else "—",
        fmt_pct(t.article_hits, t.article_n, clusters=clusters("article")) if t.article_n else "—",
    ]


def _gold_table(stats: RunStats, modes: list[str]) -> list[str]:
    out = ["", "## Gold answers", ""]
    if not any(stats.modes[m].tally.gold_n or stats.modes[m].tally.recall_n for m in stats.modes):
        return out + ["No row carries gold answers (give `answers` in a JSONL question file)."]
    out.append(
        "Accuracy: a gold answer appears in the admitted claims. Recall: a gold answer appears "
        "in the retrieved evidence (the ceiling accuracy can reach). MRR: the mean of 1/rank of "
        "the first passage holding a gold answer (0 when none does). Article hit: the passage "
        "of the article the question file names (`title`) is in the evidence."
    )
    rows = []
    for mode in modes:
        t = (stats.modes.get(mode) or ModeStats()).tally
        rows.append([f"`{mode}`", str(t.gold_n), *gold_cells(t, stats, mode)])
    return (
        out
        + [""]
        + md_table(["mode", "rows with gold", *GOLD_COLUMNS], rows)
    )


def _answerability(stats: RunStats, modes: list[str]) -> list[str]:
    total = sum(sum(stats.modes[m].answerability.values()) for m in stats.modes)
    out = ["", "## Answerability warnings", ""]
    out.append(
        f"{total} row(s) denied an answer the evidence seems to hold (answerability sidecar; "
        "the verdict is unchanged)."
    )
    if total:
        classes = sorted({c for m in stats.modes.values() for c in m.answerability})
        rows = [
            [
                f"`{mode}`",
                *(str((stats.modes.get(mode) or ModeStats()).answerability[c]) for c in classes),
            ]
            for mode in modes
        ]
        out += [""] + md_table(["mode", *classes], rows)
    return out


def _verdict_cell(cell: Tally | None) -> str:
    if cell is None:
        return "—"
    return f"{cell.strict}/{cell.hybrid}/{cell.ungrounded}/{cell.errors}"


def selected_questions(stats: RunStats) -> tuple[list[tuple[str, QuestionStats]], str]:
    """The questions the per-question tables show (all, or the worst by strict-rate past
    ``MAX_QUESTION_ROWS``) and a note saying which; the viewer's page shows the same."""
    items = list(stats.questions.items())
    if len(items) <= MAX_QUESTION_ROWS:
        return items, ""

    def strict_rate(q: QuestionStats) -> float:
        valid = sum(c.valid for c in q.cells.values())
        return sum(c.strict for c in q.cells.values()) / valid if valid else -1.0

    worst = sorted(items, key=lambda kv: (strict_rate(kv[1]), kv[1].order))[:MAX_QUESTION_ROWS]
    worst.sort(key=lambda kv: kv[1].order)
    note = (
        f"Showing the {MAX_QUESTION_ROWS} questions with the lowest strict-rate of "
        f"{len(items)}; rows.jsonl has the rest."
    )
    return worst, note


def _question_table(stats: RunStats, modes: list[str]) -> list[str]:
    selected, note = selected_questions(stats)
    out = ["", "## Per question", "", "Cells: STRICT/HYBRID/UNGROUNDED/errors."]
    if note:
        out.append(note)
    rows = [
        [str(q.order + 1), q.text, f"`{qid}`", *(_verdict_cell(q.cells.get(m)) for m in modes)]
        for qid, q in selected
    ]
    return out + [""] + md_table(["#", "question", "id", *(f"`{m}`" for m in modes)], rows)


def _quantifier_table(stats: RunStats) -> list[str]:
    out = ["", "## Quantifier preflight", ""]
    seen = [(qid, q) for qid, q in stats.questions.items() if q.intensity is not None]
    if not seen:
        return out + ["No row carries quantifier telemetry."]
    counts = Counter(q.intensity for _, q in seen)
    out.append("Intensities: " + ", ".join(f"{k} {v}" for k, v in counts.most_common()) + ".")
    selected, note = selected_questions(stats)
    if note:
        out.append(note)
    rows = []
    for _qid, q in selected:
        if q.intensity is None:
            continue
        caps = ", ".join(str(c) for c in sorted(q.caps)) or "—"
        table_caps = ", ".join(str(c) for c in sorted(q.profile_caps)) or "—"
        rows.append(
            [
                str(q.order + 1),
                q.text,
                str(q.intensity),
                q.token or "—",
                "—" if q.count is None else str(q.count),
                q.scope or "—",
                caps + (" (enforced)" if q.enforced else ""),
                table_caps,
            ]
        )
    header = ["#", "question", "intensity", "matched", "count", "scope", "cap", "profile cap"]
    return out + [""] + md_table(header, rows)


def _errors(stats: RunStats) -> list[str]:
    out = ["", "## Errors and retries", ""]
    n_errors = sum(e.errors for e in stats.endpoints.values())
    n_retried = sum(e.retried for e in stats.endpoints.values())
    out.append(
        f"{n_errors} row(s) ended in an error; "
        f"{n_retried} row(s) needed more than one attempt."
    )
    if stats.from_retry:
        out += ["", f"{stats.from_retry} row(s) came from `--retry-errors` (they replaced their "
                f"job's error row; {stats.from_retry_errors} of them ended in an error again)."]
    rows = [
        [
            f"`{name}`",
            str(e.jobs),
            str(e.errors),
            str(e.retried),
            str(e.extra_attempts),
            fmt_ms(e.llm.quantile(0.5)),
            fmt_ms(e.llm.quantile(0.95)),
        ]
        for name, e in sorted(stats.endpoints.items())
    ]
    header = [
        "endpoint",
        "jobs",
        "errors",
        "retried",
        "extra attempts",
        "LLM p50 ms",
        "LLM p95 ms",
    ]
    out += [""] + md_table(header, rows)
    if stats.errors:
        out += ["", "Errors by kind:", ""]
        out += [f"- {count} × {kind}" + (f", e.g. {md_code(stats.error_examples[kind])}"
                                         if kind in stats.error_examples else "")
                for kind, count in stats.errors.most_common()]
    return out


def _truncations(stats: RunStats, modes: list[str]) -> list[str]:
    """Answers cut off at max_tokens (finish_reason "length"): scored, but say so."""
    if not stats.truncated and not stats.budget_lowered:
        return []
    header = ["mode", "truncated answers", "max_tokens lowered to fit the context"]
    rows = [
        [f"`{m}`", str(stats.truncated[m]), str(stats.budget_lowered[m])]
        for m in modes
        if stats.truncated[m] or stats.budget_lowered[m]
    ]
    out = ["", "## Truncated answers", ""]
    out.append(
        "Rows with `truncated: true` ended at their token budget (finish_reason `length`); "
        "they are verified and counted like any answer. `max_tokens_effective` in a row is the "
        "lowered budget."
    )
    return out + [""] + md_table(header, rows)


def _timings(stats: RunStats) -> list[str]:
    rows = []
    for key, label in STAGES:
        s = stats.stages[key]
        rows.append(
            [
                label,
                str(s.count),
                fmt_ms(s.quantile(0.5)),
                fmt_ms(s.quantile(0.95)),
                fmt_ms(s.mean),
            ]
        )
    out = ["", "## Stage timings", ""]
    return out + md_table(["stage", "rows", "p50 ms", "p95 ms", "mean ms"], rows)


def plots_section(plots: Mapping[str, str] | None) -> list[str]:
    if not plots:
        return []
    out = ["", "## Plots", ""]
    for title, path in plots.items():
        out += [f"![{title}]({path})", ""]
    return out


def render_stats(
    manifest: Manifest | Mapping[str, Any],
    stats: RunStats,
    *,
    plots: Mapping[str, str] | None = None,
    finished_at: float | None = None,
    status: str | None = None,
    cancelled_jobs: int | None = None,
    paused: float = 0.0,
) -> str:
    """Render an already accumulated run; ``render_summary`` is this plus the pass over rows.
    ``cancelled_jobs``: the farm's count of jobs a cancel stopped (status.json); ``paused``:
    seconds between interrupts and resumes, left out of the wall time
    (``StatusRecord.time_paused``)."""
    man = manifest if isinstance(manifest, Manifest) else Manifest.model_validate(manifest)
    modes = stats.mode_order(m.value for m in man.modes)
    sections = [
        _header(man, stats, finished_at, status, cancelled_jobs, paused),
        _mode_table(stats, modes),
        _kinds_table(stats, modes),
        _label_table(stats, modes),
        _dry_run_table(man, stats, modes),
        _reject_broad_table(man, stats, modes),
        _gold_table(stats, modes),
        _answerability(stats, modes),
        _question_table(stats, modes),
        _quantifier_table(stats),
        _errors(stats),
        _truncations(stats, modes),
        _timings(stats),
        _cost(man, stats, modes, finished_at, paused),
        plots_section(plots),
    ]
    return "\n".join(line for section in sections for line in section).rstrip() + "\n"


def render_summary(
    manifest: Manifest | dict,
    rows: Iterable[Row | dict],
    *,
    plots: dict[str, str] | None = None,
    finished_at: float | None = None,
    status: str | None = None,
) -> str:
    """``summary.md`` for a run: one streaming pass over ``rows``, bounded memory."""
    stats = accumulate(rows)
    return render_stats(manifest, stats, plots=plots, finished_at=finished_at, status=status)


def selection_note(man: Manifest) -> str:
    """What a limited run says beside its question count: the run is not the whole file."""
    sel = man.selection
    if sel is None:
        return ""
    how = (f"the first {sel.limit}" if sel.limit is not None
           else f"a sample (`--sample {sel.sample} --seed {sel.seed}`)")
    return f" (LIMITED: {how} of the file's {sel.of} questions)"
