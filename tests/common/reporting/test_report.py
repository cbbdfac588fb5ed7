"""summary.md on synthetic rows with known counts: every number in every table is checked."""

from __future__ import annotations

from typing import Any

import pytest

from qfarm.common.models import Manifest, Row
from qfarm.common.policy import (
    Policy,
    build_policy,
    governance_policy_hash,
    verifier_policy_hash,
)
from qfarm.common.reporting.report import fmt_ms, render_summary
from qfarm.common.reporting.runstats import MAX_QUESTION_ROWS
from qfarm.common.reporting.stats import percentile, rate_interval

MODES = ("quote", "claim_lattice_pointer", "claim_lattice")
POLICY = build_policy({"quantifier_reminder_enabled": True})


def make_manifest(**overrides: Any) -> Manifest:
    data: dict[str, Any] = dict(
        run_id="run-test",
        created_at=1_000.0,
        question_file="bench/questions/smoke.txt",
        question_file_digest="sha256:feed",
        n_questions=5,
        modes=MODES,
        n=2,
        n_jobs=30,
        policy=POLICY,
        verifier_policy_hash=verifier_policy_hash(POLICY),
        governance_policy_hash=governance_policy_hash(POLICY),
        model="adamo1139/Hermes-3-Llama-3.1-8B-FP8-Dynamic",
        model_profile_id="hermes-3-8b",
        endpoints=("http://gpu1:8000", "http://gpu2:8000"),
        simulated=True,
        retriever="embedded",
        index_version="idx-7",
    )
    data.update(overrides)
    return Manifest(**data)


def make_row(qid: str, mode: str, i: int, verdict: str | None, **kw: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "run_id": "run-test",
        "job_id": f"{qid}-{mode}-{i}",
        "question": f"Question {qid}?",
        "question_id": qid,
        "mode": mode,
        "sample_index": i,
        "verdict": verdict,
        "ratio": {"STRICT": 1.0, "HYBRID": 0.5, "UNGROUNDED": 0.0}.get(verdict or ""),
        "violation_kinds": [],
        "attempts": 1,
        "verifier_policy_hash": verifier_policy_hash(POLICY),
        "governance_policy_hash": governance_policy_hash(POLICY),
        "model": "adamo1139/Hermes-3-Llama-3.1-8B-FP8-Dynamic",
        "simulated": True,
    }
    row.update(kw)
    if row.get("usage") and "llm_request" not in row:  # a model answered: its request
        llm_ms = (row.get("timings") or {}).get("llm_ms", 0.0)
        row["llm_request"] = {"sent_at": 1_700_000_000.0, "ms": llm_ms, "prompts": 1}
    return row


QUANT = {
    "q1": dict(
        quantifier_intensity="SINGULAR",
        scope_bound_hint="unknown",
        claim_cap_applied=12,
        claim_cap_profile=1,
    ),
    "q2": dict(
        quantifier_intensity="ALL",
        quantifier_matched_token="all",
        scope_bound_hint="bounded",
        claim_cap_applied=8,
    ),
    "q3": dict(
        quantifier_intensity="OPEN_REQUEST",
        quantifier_matched_token="tell me about",
        scope_bound_hint="unbounded",
        claim_cap_applied=5,
        claim_cap_enforced=True,
    ),
    "q4": dict(
        quantifier_intensity="SMALL_NUM_EXPLICIT",
        quantifier_matched_token="top 3",
        quantifier_explicit_count=3,
        scope_bound_hint="unknown",
        claim_cap_applied=3,
    ),
    "q5": dict(
        quantifier_intensity="FEW",
        quantifier_matched_token="a few",
        scope_bound_hint="unknown",
        claim_cap_applied=5,
    ),
}
QIDS = ("q1", "q2", "q3", "q4", "q5")

# (question, sample) -> verdict, per mode. None marks an error row.
QUOTE = dict(
    zip([(q, i) for q in QIDS for i in (0, 1)], "SS SS SS SS HU".replace(" ", ""), strict=True)
)
CPL = {
    ("q1", 0): "S", ("q1", 1): "S", ("q2", 0): "S", ("q2", 1): "S",
    ("q3", 0): "H", ("q3", 1): "H", ("q4", 0): "U", ("q4", 1): "U",
    ("q5", 0): None, ("q5", 1): None,
}  # fmt: skip
FULL = {"S": "STRICT", "H": "HYBRID", "U": "UNGROUNDED"}


def synthetic_rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for k, ((q, i), v) in enumerate(QUOTE.items()):
        kinds = {"H": ["CITATION_MISMATCH"], "U": ["DEFLECTION_DETECTED"]}.get(v, [])
        rows.append(
            make_row(
                q, "quote", i, FULL[v],
                violation_kinds=kinds,
                format_collapsed=False,
                endpoint="http://gpu1:8000",
                attempts=2 if q == "q1" else 1,
                timings={"total_ms": 100.0 * (k + 1), "llm_ms": 50.0 * (k + 1), "retrieval_ms": 3.0},
                usage={"prompt_tokens": 100, "completion_tokens": 10},
                gold_in_claims=v == "S",
                gold_in_evidence=True,
                gold_evidence_rank=1 if k % 2 == 0 else 2,
                article_in_evidence=k < 8,
                answerability=(
                    {"answerability_fired": True, "answerability_confidence": "medium"} if v == "U" else None
                ),
                **QUANT[q],
            )
        )  # fmt: skip
    valid = 0
    for (q, i), v in CPL.items():
        if v is None:
            internal = i == 1  # failed before it reached an endpoint
            rows.append(
                make_row(
                    q, "claim_lattice_pointer", i, None,
                    error="internal: cache entry: boom" if internal
                    else "llm: HTTP 500 from http://gpu2:8000",
                    error_kind="internal" if internal else "llm",
                    endpoint=None if internal else "http://gpu2:8000",
                    attempts=0 if internal else 4,
                    timings={} if internal else {"total_ms": 9_000.0, "llm_ms": 8_000.0},
                )
            )  # fmt: skip
            continue
        valid += 1
        kinds = {"H": ["NO_EVIDENCE_POINTER"], "U": ["FORMAT_COLLAPSED", "NO_EVIDENCE_POINTER"]}
        rows.append(
            make_row(
                q, "claim_lattice_pointer", i, FULL[v],
                violation_kinds=kinds.get(v, []),
                format_collapsed=v == "U",
                answer_brackets={"S": 2, "H": 1, "U": 0}[v],
                endpoint="http://gpu2:8000",
                timings={"total_ms": 100.0 * valid, "llm_ms": 50.0 * valid, "verify_ms": 2.0},
                usage={"prompt_tokens": 200, "completion_tokens": 20},
                gold_in_claims=v == "S",
                gold_in_evidence=True,
                gold_evidence_rank=1,
                **QUANT[q],
            )
        )  # fmt: skip
    for q in QIDS:
        for i in (0, 1):
            rows.append(
                make_row(
                    q, "claim_lattice", i, "UNGROUNDED",
                    violation_kinds=["FORMAT_COLLAPSED"] if i == 0 else [],
                    format_collapsed=i == 0,
                    answer_brackets=0,
                    endpoint="http://gpu1:8000",
                    timings={"total_ms": 50.0, "llm_ms": 25.0},
                    usage={"prompt_tokens": 300, "completion_tokens": 30 if i == 0 else 40},
                    answerability=(
                        {"answerability_fired": True, "answerability_confidence": "strong"}
                        if q in ("q1", "q2") and i == 0 else None
                    ),
                    **QUANT[q],
                )
            )  # fmt: skip
    return rows


def ci(*clusters: tuple[int, int]) -> str:
    """The bracket a rate over these per-question (k, n) cells carries."""
    low, high = rate_interval(clusters)
    return f"[{100 * low:.1f}–{100 * high:.1f}]"


def table(text: str, heading: str) -> list[dict[str, str]]:
    """The first markdown table after ``heading``, as dicts keyed by header cell."""
    lines = text.splitlines()
    start = lines.index(heading)
    rows: list[list[str]] = []
    for line in lines[start + 1 :]:
        if line.startswith("## "):
            break
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif rows:
            break
    header, body = rows[0], rows[2:]
    return [dict(zip(header, r, strict=True)) for r in body]


def by(rows: list[dict[str, str]], key: str) -> dict[str, dict[str, str]]:
    return {r[key]: r for r in rows}


@pytest.fixture(scope="module")
def summary() -> str:
    return render_summary(
        make_manifest(), synthetic_rows(), finished_at=1_060.0, plots={"strict": "s.png"}
    )


def test_header(summary: str) -> None:
    facts = {r["run"]: r[""] for r in table(summary, "# qfarm run `run-test`")}
    assert "SIMULATED" in summary.split("|")[0]
    assert facts["question file"] == "`bench/questions/smoke.txt` (sha256:feed)"
    assert facts["questions × modes × n"] == "5 × 3 × 2 = 30 jobs"
    # Two of the rows are errors: the header says so beside the count.
    assert facts["rows"] == "30 of 30 expected; 2 of 30 rows are errors (6.7 %)"
    assert facts["policy overrides"] == "`quantifier_reminder_enabled=true`"
    assert facts["verifier_policy_hash"] == f"`{verifier_policy_hash(POLICY)}`"
    assert facts["governance_policy_hash"] == f"`{governance_policy_hash(POLICY)}`"
    assert facts["endpoints"] == "`http://gpu1:8000`, `http://gpu2:8000`"
    assert facts["LLM"] == "SIMULATED (vLLM simulator)"
    assert facts["retriever"] == "embedded, index `idx-7`"
    assert facts["started"] == "1970-01-01 00:16:40 UTC"
    assert facts["finished"] == "1970-01-01 00:17:40 UTC"
    assert facts["wall time"] == "60.0 s"
    assert facts["throughput"] == "0.50 jobs/s"
    assert "**Warnings**" not in summary


def test_a_server_qfarm_started_is_named_and_the_run_is_not_simulated() -> None:
    server = "llama.cpp server (llama-cpp-python 0.3.36), CPU, local"
    man = make_manifest(simulated=False, llm_server=server, model="SmolLM2-135M-Instruct.Q4_1",
                        model_profile_id="small-local")
    rows = [{**r, "simulated": False} for r in synthetic_rows()]
    text = render_summary(man, rows, finished_at=1_060.0)
    facts = {r["run"]: r[""] for r in table(text, "# qfarm run `run-test`")}
    assert facts["LLM"] == server
    assert facts["model"] == "`SmolLM2-135M-Instruct.Q4_1` (profile `small-local`)"
    assert "SIMULATED" not in text


def test_mode_table(summary: str) -> None:
    modes = by(table(summary, "## Verdicts by mode"), "mode")
    quote, cpl, cl = modes["`quote`"], modes["`claim_lattice_pointer`"], modes["`claim_lattice`"]
    assert [quote[k] for k in ("jobs", "S", "H", "U", "errors")] == ["10", "8", "1", "1", "0"]
    assert quote["strict-rate (of answered)"] == "80.0% " + ci(*[(2, 2)] * 4, (0, 2))  # clustered, n=2
    assert quote["UNGROUNDED rate (of answered)"] == "10.0% " + ci(*[(0, 2)] * 4, (1, 2))
    assert quote["mean ratio (of answered)"] == "0.850"
    assert (quote["p50 ms"], quote["p95 ms"]) == ("550", "955")  # 100..1000 ms
    assert (quote["prompt tok/job"], quote["completion tok/job"]) == ("100.0", "10.0")
    # Error rows (one HTTP 500, one internal error) are errors, not verdicts.
    assert [cpl[k] for k in ("jobs", "S", "H", "U", "errors")] == ["10", "4", "2", "2", "2"]
    assert cpl["strict-rate (of answered)"] == "50.0% " + ci((2, 2), (2, 2), (0, 2), (0, 2))  # q5: errors
    assert cpl["UNGROUNDED rate (of answered)"] == "25.0% " + ci((0, 2), (0, 2), (0, 2), (2, 2))
    assert cpl["mean ratio (of answered)"] == "0.625"
    # The headline rate is over the jobs, the two error rows counted as failures.
    assert cpl["strict-rate (of jobs; errors fail)"] == "40.0% " + ci(
        (2, 2), (2, 2), (0, 2), (0, 2), (0, 2))
    assert cpl["error rate (of jobs)"] == "20.0% " + ci(*[(0, 2)] * 4, (2, 2))
    assert quote["strict-rate (of jobs; errors fail)"] == quote["strict-rate (of answered)"]
    assert quote["error rate (of jobs)"].startswith("0.0% [")
    assert 'Denominators: "of jobs" is every job of the mode with a row' in summary
    assert (cpl["p50 ms"], cpl["p95 ms"]) == ("450", "765")  # 100..800 ms, errors excluded
    assert (cpl["prompt tok/job"], cpl["completion tok/job"]) == ("200.0", "20.0")
    assert [cl[k] for k in ("jobs", "S", "H", "U", "errors")] == ["10", "0", "0", "10", "0"]
    assert cl["strict-rate (of answered)"] == "0.0% " + ci(*[(0, 2)] * 5)
    assert cl["UNGROUNDED rate (of answered)"] == "100.0% " + ci(*[(2, 2)] * 5)
    assert cl["mean ratio (of answered)"] == "0.000"
    assert (cl["p50 ms"], cl["p95 ms"]) == ("50", "50")
    assert (cl["prompt tok/job"], cl["completion tok/job"]) == ("300.0", "35.0")
    # The uncertainty sentence uses the smallest verdict count (8, in claim_lattice_pointer),
    # and says the samples of a question are clustered.
    assert "clustered by question: the 8 verdicts of `claim_lattice_pointer` come from 4 " \
        "questions" in summary


def _one_mode_summary(verdicts: dict[tuple[str, int], str]) -> str:
    n = 1 + max(i for _, i in verdicts)
    questions = sorted({q for q, _ in verdicts})
    man = make_manifest(modes=["quote"], n=n, n_questions=len(questions))
    rows = [make_row(q, "quote", i, FULL[v]) for (q, i), v in verdicts.items()]
    return render_summary(man, rows, finished_at=1_060.0)


def test_one_sample_per_question_keeps_wilson() -> None:
    verdicts = {(f"q{j}", 0): "S" if j < 8 else "U" for j in range(10)}
    text = _one_mode_summary(verdicts)
    quote = by(table(text, "## Verdicts by mode"), "mode")["`quote`"]
    assert quote["strict-rate (of answered)"] == "80.0% [49.0–94.3]"  # Wilson 8/10 (Newcombe 1998)
    assert "Rates carry 95% Wilson intervals" in text


def test_repeated_samples_of_one_question_widen_the_interval() -> None:
    # 10 questions x 3 samples, every sample of a question alike: 30 verdicts that weigh
    # like 10, so the interval is wider than Wilson's over 30 (and than over 10 at z).
    verdicts = {(f"q{j}", i): "S" if j < 8 else "U" for j in range(10) for i in range(3)}
    text = _one_mode_summary(verdicts)
    cell = by(table(text, "## Verdicts by mode"), "mode")["`quote`"]["strict-rate (of answered)"]
    low, high = (float(x) for x in cell.split("[")[1].rstrip("]").split("–"))
    assert (low, high) == pytest.approx((100 * rate_interval([(3, 3)] * 8 + [(0, 3)] * 2)[0],
                                         100 * rate_interval([(3, 3)] * 8 + [(0, 3)] * 2)[1]),
                                        abs=0.06)
    assert high - low > 94.3 - 49.0 > 100 * (0.9 - 0.63)  # wider than Wilson 8/10 and 24/30
    assert "clustered by question" in text and "design effect is 3.33" in text  # 3 x 10/9


def test_kinds_table(summary: str) -> None:
    modes = by(table(summary, "## Format collapse and violation kinds"), "mode")
    kinds = ["CITATION_MISMATCH", "DEFLECTION_DETECTED", "FORMAT_COLLAPSED", "NO_EVIDENCE_POINTER"]
    assert list(modes["`quote`"])[5:] == kinds  # one column per kind seen, sorted
    quote, cpl, cl = modes["`quote`"], modes["`claim_lattice_pointer`"], modes["`claim_lattice`"]
    assert quote["FORMAT_COLLAPSED rate"] == "0.0% " + ci(*[(0, 2)] * 5)
    assert quote["mean raw brackets"] == "—"  # lattice modes only
    assert [quote[k] for k in kinds] == ["1 (10.0%)", "1 (10.0%)", "0 (0.0%)", "0 (0.0%)"]
    assert cpl["FORMAT_COLLAPSED rate"] == "25.0% " + ci((0, 2), (0, 2), (0, 2), (2, 2))
    assert cpl["mean raw brackets"] == "1.25"  # (4×2 + 2×1 + 2×0) / 8
    assert [cpl[k] for k in kinds] == ["0 (0.0%)", "0 (0.0%)", "2 (25.0%)", "4 (50.0%)"]
    assert cl["FORMAT_COLLAPSED rate"] == "50.0% " + ci(*[(1, 2)] * 5)
    assert cl["mean raw brackets"] == "0.00"
    assert [cl[k] for k in kinds] == ["0 (0.0%)", "0 (0.0%)", "5 (50.0%)", "0 (0.0%)"]


def test_gold_table(summary: str) -> None:
    modes = by(table(summary, "## Gold answers"), "mode")
    quote, cpl, cl = modes["`quote`"], modes["`claim_lattice_pointer`"], modes["`claim_lattice`"]
    assert quote["rows with gold"] == "10"
    assert quote["answer accuracy"] == "80.0% " + ci(*[(2, 2)] * 4, (0, 2))
    assert quote["retrieval recall"] == "100.0% " + ci(*[(2, 2)] * 5)
    assert cpl["rows with gold"] == "8"
    assert cpl["answer accuracy"] == "50.0% " + ci((2, 2), (2, 2), (0, 2), (0, 2))
    assert cpl["retrieval recall"] == "100.0% " + ci(*[(2, 2)] * 4)
    assert (cl["rows with gold"], cl["answer accuracy"], cl["retrieval recall"]) == ("0", "—", "—")
    # MRR: five quote rows find gold at rank 1 and five at rank 2; article hit only where a
    # question file names the article.
    assert (quote["MRR"], quote["article hit"]) == ("0.750", "80.0% " + ci(*[(2, 2)] * 4, (0, 2)))
    assert (cpl["MRR"], cpl["article hit"]) == ("1.000", "—")
    assert (cl["MRR"], cl["article hit"]) == ("—", "—")


def test_answerability_count(summary: str) -> None:
    assert "3 row(s) denied an answer the evidence seems to hold" in summary
    modes = by(table(summary, "## Answerability warnings"), "mode")
    assert modes["`quote`"] == {"mode": "`quote`", "medium": "1", "strong": "0"}
    assert modes["`claim_lattice`"] == {"mode": "`claim_lattice`", "medium": "0", "strong": "2"}
    assert modes["`claim_lattice_pointer`"]["strong"] == "0"


def test_summary_cites_no_design_document_outside_the_repository(summary: str) -> None:
    # The summary is read by people without the design notes; it names things in its own words.
    assert "3 row(s) denied an answer" in summary  # the answerability section is rendered
    assert "SPEC" not in summary and "§" not in summary


def test_question_table(summary: str) -> None:
    rows = by(table(summary, "## Per question"), "id")
    expected = {
        "q1": ("2/0/0/0", "2/0/0/0", "0/0/2/0"),
        "q2": ("2/0/0/0", "2/0/0/0", "0/0/2/0"),
        "q3": ("2/0/0/0", "0/2/0/0", "0/0/2/0"),
        "q4": ("2/0/0/0", "0/0/2/0", "0/0/2/0"),
        "q5": ("0/1/1/0", "0/0/0/2", "0/0/2/0"),
    }
    assert list(rows) == [f"`{q}`" for q in expected]
    for n, (q, cells) in enumerate(expected.items(), start=1):
        row = rows[f"`{q}`"]
        assert row["#"] == str(n) and row["question"] == f"Question {q}?"
        assert (row["`quote`"], row["`claim_lattice_pointer`"], row["`claim_lattice`"]) == cells


def test_quantifier_table(summary: str) -> None:
    assert "Intensities: SINGULAR 1, ALL 1, OPEN_REQUEST 1, SMALL_NUM_EXPLICIT 1, FEW 1." in summary
    rows = by(table(summary, "## Quantifier preflight"), "#")
    cols = ("intensity", "matched", "count", "scope", "cap")
    assert tuple(rows["1"][c] for c in cols) == ("SINGULAR", "—", "—", "unknown", "12")
    assert rows["1"]["profile cap"] == "1"  # the table's value, reported but not enforced
    assert rows["2"]["profile cap"] == "—"
    assert tuple(rows["2"][c] for c in cols) == ("ALL", "all", "—", "bounded", "8")
    assert tuple(rows["3"][c] for c in cols) == (
        "OPEN_REQUEST",
        "tell me about",
        "—",
        "unbounded",
        "5 (enforced)",
    )
    assert tuple(rows["4"][c] for c in cols) == ("SMALL_NUM_EXPLICIT", "top 3", "3", "unknown", "3")
    assert tuple(rows["5"][c] for c in cols) == ("FEW", "a few", "—", "unknown", "5")


def test_errors_and_retries(summary: str) -> None:
    assert (
        "2 row(s) ended in an error; 3 row(s) needed more than one attempt." in summary
    )
    rows = by(table(summary, "## Errors and retries"), "endpoint")
    cols = ("jobs", "errors", "retried", "extra attempts")
    assert tuple(rows["`http://gpu1:8000`"][c] for c in cols) == ("20", "0", "2", "2")
    assert tuple(rows["`http://gpu2:8000`"][c] for c in cols) == ("9", "1", "1", "3")
    assert tuple(rows["`(none)`"][c] for c in cols) == ("1", "1", "0", "0")
    assert "cancelled" not in rows["`(none)`"]  # no row is ever written for a cancelled job
    gpu1_llm = sorted([50.0 * k for k in range(1, 11)] + [25.0] * 10)
    assert rows["`http://gpu1:8000`"]["LLM p50 ms"] == fmt_ms(percentile(gpu1_llm, 50))
    assert rows["`http://gpu1:8000`"]["LLM p95 ms"] == fmt_ms(percentile(gpu1_llm, 95))
    gpu2_llm = sorted([50.0 * k for k in range(1, 9)] + [8_000.0])
    assert rows["`http://gpu2:8000`"]["LLM p95 ms"] == fmt_ms(percentile(gpu2_llm, 95))
    assert rows["`(none)`"]["LLM p50 ms"] == "—"
    # Grouped by the rows' error kind, each with its first error's text.
    assert "- 1 × llm, e.g. `llm: HTTP 500 from http://gpu2:8000`" in summary
    assert "- 1 × internal, e.g. `internal: cache entry: boom`" in summary


def test_stage_timings(summary: str) -> None:
    rows = by(table(summary, "## Stage timings"), "stage")
    total = sorted(
        [100.0 * k for k in range(1, 11)]
        + [100.0 * k for k in range(1, 9)]
        + [9_000.0]
        + [50.0] * 10
    )
    assert rows["total"]["rows"] == "29"  # every row with a timing, errors included
    assert rows["total"]["p50 ms"] == fmt_ms(percentile(total, 50))
    assert rows["total"]["p95 ms"] == fmt_ms(percentile(total, 95))
    assert rows["total"]["mean ms"] == fmt_ms(sum(total) / len(total))
    assert (rows["retrieval"]["rows"], rows["retrieval"]["p50 ms"]) == ("10", "3.0")
    assert (rows["verify"]["rows"], rows["verify"]["mean ms"]) == ("8", "2.0")
    assert (rows["queue wait"]["rows"], rows["queue wait"]["p50 ms"]) == ("0", "—")


def test_fmt_ms() -> None:
    assert (fmt_ms(None), fmt_ms(0.42), fmt_ms(9.96), fmt_ms(10.4), fmt_ms(12_345.6)) == (
        "—",
        "0.4",
        "10.0",
        "10",
        "12,346",
    )


def test_long_questions_are_cut_with_an_ellipsis() -> None:
    long_q = "Why " + "very " * 30 + "long?"
    text = render_summary(
        make_manifest(n_questions=1, n_jobs=3),
        [make_row("q1", "quote", 0, "STRICT", question=long_q)],
    )
    cell = table(text, "## Per question")[0]["question"]
    assert cell.endswith("…") and len(cell) == 90 and long_q.startswith(cell[:-1])


def test_plots_are_linked(summary: str) -> None:
    assert "![strict](s.png)" in summary


def test_row_models_and_dicts_render_the_same() -> None:
    # A model's own dump, not the partial synthetic dict: a verified row's grading fills its defaults.
    models = [Row.model_validate(d) for d in synthetic_rows()]
    dicts = [m.model_dump(mode="json") for m in models]
    man = make_manifest()
    assert render_summary(man, models, finished_at=1_060.0) == render_summary(
        man.model_dump(mode="json"), iter(dicts), finished_at=1_060.0
    )


def test_warnings_for_missing_rows_foreign_hashes_and_duplicates() -> None:
    rows = synthetic_rows()[:20]
    rows[0] = {**rows[0], "verifier_policy_hash": "deadbeef"}
    rows.append(dict(rows[1]))  # the same job twice
    text = render_summary(make_manifest(), rows)
    assert "**Warnings**" in text
    # 21 lines, 20 jobs: ten jobs have no row, not nine (jobs are counted, not lines).
    assert "10 of 30 jobs have no row" in text
    assert "rows.jsonl holds 1 rows for jobs that already have one" in text
    assert "1 rows carry a verifier_policy_hash other than the manifest's" in text
    assert "1 question × mode cells have more than n=2 rows" in text


def test_real_run_has_no_simulator_banner_and_empty_run_renders() -> None:
    text = render_summary(make_manifest(simulated=False), [])
    assert "SIMULATED" not in text
    assert "No row reached a verdict." in text
    assert "30 of 30 jobs have no row" in text
    assert "No row carries gold answers" in text


def test_question_table_is_bounded() -> None:
    n_questions = MAX_QUESTION_ROWS + 5
    rows = [
        make_row(f"q{k:04d}", "quote", 0, "UNGROUNDED" if k % 7 == 0 else "STRICT")
        for k in range(n_questions)
    ]
    man = make_manifest(n_questions=n_questions, modes=("quote",), n=1, n_jobs=n_questions)
    text = render_summary(man, rows)
    shown = table(text, "## Per question")
    assert len(shown) == MAX_QUESTION_ROWS
    assert (
        f"Showing the {MAX_QUESTION_ROWS} questions with the lowest strict-rate of {n_questions}"
        in text
    )
    # Every all-UNGROUNDED question is among those shown.
    shown_ids = {r["id"] for r in shown}
    assert all(f"`q{k:04d}`" in shown_ids for k in range(0, n_questions, 7))


# -------------------------------------------- grounding labels, caps and reject-broad


def labelled_rows() -> list[dict[str, Any]]:
    """Pointer rows with known labels, pointer counts and bracketed characters."""
    labels = [
        ("EVIDENCE-WARRANTED", "STRICT"),
        ("EVIDENCE-WARRANTED", "STRICT"),
        ("BROAD-CAPPED", "HYBRID"),
        ("ANCHOR-WARRANTED", "HYBRID"),
        ("UNGROUNDED", "UNGROUNDED"),
    ]
    return [
        make_row(
            f"q{k}",
            "claim_lattice_pointer",
            0,
            verdict,
            label=label,
            answer_pointer_count=k,
            answer_chars_with_brackets=2 * k,
        )
        for k, (label, verdict) in enumerate(labels)
    ]


def test_label_table_counts_broad_capped_apart_from_evidence_warranted() -> None:
    text = render_summary(make_manifest(modes=("claim_lattice_pointer",)), labelled_rows())
    row = by(table(text, "## Labels by mode"), "mode")["`claim_lattice_pointer`"]
    assert row["EVIDENCE-WARRANTED"] == "2 (40.0%)"
    assert row["BROAD-CAPPED"] == "1 (20.0%)"
    assert row["ANCHOR-WARRANTED"] == "1 (20.0%)"
    assert row["UNGROUNDED"] == "1 (20.0%)"
    assert row["POINTER-LINKED"] == "0 (0.0%)"


def test_pointer_and_bracket_columns_average_the_row_fields() -> None:
    text = render_summary(make_manifest(modes=("claim_lattice_pointer",)), labelled_rows())
    row = by(table(text, "## Format collapse and violation kinds"), "mode")[
        "`claim_lattice_pointer`"
    ]
    assert (row["mean ids cited"], row["mean bracketed chars"]) == ("2.00", "4.0")  # 0..4, ×2


def bounded_rows() -> list[dict[str, Any]]:
    rejected = {"violation_kinds": ["BROAD_QUANTIFIER_REJECTED"], "label": "BROAD-REJECTED"}
    rows = [
        make_row(
            "b1", "claim_lattice_pointer", 0, "UNGROUNDED", question_scope="bounded", **rejected
        ),
        make_row("b2", "claim_lattice_pointer", 0, "STRICT", question_scope="bounded"),
        make_row("b3", "claim_lattice_pointer", 0, "STRICT", question_scope="bounded"),
        make_row("b4", "claim_lattice_pointer", 0, "STRICT", question_scope="bounded"),
        # an unbounded question rejected is no false positive
        make_row("u1", "claim_lattice_pointer", 0, "UNGROUNDED", **rejected),
        make_row("b1", "quote", 0, "STRICT", question_scope="bounded"),
    ]
    return rows


def test_reject_broad_false_positive_rate_per_mode() -> None:
    policy = build_policy({"quantifier_reject_broad": True})
    man = make_manifest(modes=("quote", "claim_lattice_pointer"), policy=policy)
    modes = by(
        table(render_summary(man, bounded_rows()), "## Reject-broad false positives"), "mode"
    )
    cpl, quote = modes["`claim_lattice_pointer`"], modes["`quote`"]
    assert (cpl["bounded rows"], cpl["rejected"]) == ("4", "1")
    assert cpl["reject-broad false-positive rate"].startswith("25.0% [")
    assert (quote["bounded rows"], quote["rejected"]) == ("1", "0")
    assert quote["reject-broad false-positive rate"].startswith("0.0% [")


def test_no_false_positive_section_without_reject_broad() -> None:
    text = render_summary(make_manifest(), bounded_rows())
    assert "## Reject-broad false positives" not in text


def dry_run_rows() -> list[dict[str, Any]]:
    unbound, runaway = "BROAD_QUANTIFIER_SCOPE_UNBOUND", "BROAD_QUANTIFIER_RUNAWAY"
    return [
        make_row("u1", "claim_lattice_pointer", 0, "STRICT", would_fire_kinds=[unbound]),
        make_row("u1", "claim_lattice_pointer", 1, "HYBRID", would_fire_kinds=[unbound, runaway]),
        make_row("u2", "claim_lattice_pointer", 0, "STRICT", would_fire_kinds=[runaway]),
        make_row("q1", "claim_lattice_pointer", 0, "STRICT"),
        make_row("u1", "quote", 0, "STRICT"),
    ]


def test_the_dry_run_table_counts_would_fire_kinds_apart_from_the_rates() -> None:
    man = make_manifest(modes=("quote", "claim_lattice_pointer"), policy=build_policy({}))
    text = render_summary(man, dry_run_rows())
    modes = by(table(text, "## Quantifier guard dry run"), "mode")
    cpl, quote = modes["`claim_lattice_pointer`"], modes["`quote`"]
    assert cpl["BROAD_QUANTIFIER_SCOPE_UNBOUND"] == "2 (50.0%)"
    assert cpl["BROAD_QUANTIFIER_RUNAWAY"] == "2 (50.0%)"
    # only u1's STRICT row carries a kind that demotes; RUNAWAY caps the label only
    assert cpl["STRICT it would demote"] == "1 (25.0%)"
    assert (cpl["guarded"], quote["guarded"]) == ("yes", "no")
    assert quote["BROAD_QUANTIFIER_SCOPE_UNBOUND"] == "0 (0.0%)"
    # the kinds stay out of the violation-kind table and the rates
    assert "BROAD_QUANTIFIER" not in text.split("## Format collapse and violation kinds")[1].split("\n## ")[0]
    verdicts = by(table(text, "## Verdicts by mode"), "mode")["`claim_lattice_pointer`"]
    assert verdicts["strict-rate (of answered)"].startswith("75.0% [")


def test_no_dry_run_table_with_caps_applied_or_the_guard_off() -> None:
    for policy in ({"quantifier_guard_apply_caps": True}, {"quantifier_guard_enabled": False}):
        text = render_summary(make_manifest(policy=build_policy(policy)), dry_run_rows())
        assert "## Quantifier guard dry run" not in text
    quiet = render_summary(make_manifest(policy=build_policy({})), labelled_rows())
    assert "No row would have fired a broad-quantifier kind." in quiet


def test_question_html_and_control_characters_stay_text() -> None:
    """A question (or a server's error) carrying HTML or NUL: summary.md shows it as text."""
    xss, nul = "<script>alert(1)</script>", "before\x00after\x1b[31m"
    rows = [
        make_row("q1", "quote", 0, "STRICT", question=f"{xss} & {nul}?"),
        make_row("q2", "quote", 0, None, question="`<b>` bold?",
                 error=f"server said ``{xss}`` {nul}"),
    ]
    text = render_summary(make_manifest(modes=("quote",), n=1, n_jobs=2, n_questions=2), rows)
    assert "\x00" not in text and "\x1b" not in text
    outside_code = [line for line in text.splitlines() if not line.startswith("- 1 × ")]
    assert not any("<script" in line for line in outside_code)
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; before\ufffdafter\ufffd[31m?" in text
    assert "`<b>` bold?" in text  # a code span is shown verbatim already
    assert f"- 1 × (kind not recorded), e.g. ```server said ``{xss}`` before\ufffdafter\ufffd[31m```" in text


def test_the_summary_says_whether_answers_were_decoded_under_a_grammar() -> None:
    from qfarm.common.reporting.report import _output_note

    assert _output_note(Policy()) == "free text (no grammar)"
    note = _output_note(Policy(structured_output=True))
    assert note.startswith("decoded under each mode's grammar") and "grammar-v1" in note


def test_a_complete_run_with_error_rows_reads_completed_with_errors() -> None:
    text = render_summary(make_manifest(), synthetic_rows(), finished_at=1_060.0,
                          status="complete")
    facts = {r["run"]: r[""] for r in table(text, "# qfarm run `run-test`")}
    assert facts["status"] == "completed with errors (2, 6.7 %)"
    clean = [r for r in synthetic_rows() if not r.get("error") and r.get("verdict")]
    text = render_summary(make_manifest(), clean, finished_at=1_060.0, status="complete")
    assert {r["run"]: r[""] for r in table(text, "# qfarm run `run-test`")}["status"] == "complete"
