"""The viewer's rows index holds columns of codes, not an object per row: every filter and
sort picks the same rows as a plain check of each generated row, and memory grows by a
bounded amount a row."""

from __future__ import annotations

import tracemalloc
from typing import Any

import pytest

from qfarm.producer.viewer.index import FILTERS, SORTS, RowColumns, sort_positions

MODES = ("quote", "claim_lattice_pointer", "claim_lattice")
KINDS = ("CITATION_MISMATCH", "NO_EVIDENCE_POINTER")
ANSWER = '"The Seine flows through it." [E{}]'  # 36 bytes


def row(k: int) -> dict[str, Any]:
    error = "llm: endpoint timed out" if k % 11 == 0 else None
    return {
        "job_id": f"job{k}", "question_id": f"q{k % 40}",
        "question": f"Which river is number {k % 40}?" if k % 7 else f"Straße Nr. {k % 40}?",
        "mode": MODES[k % 3], "sample_index": (k * 7) % 5,
        "verdict": None if error else ("STRICT", "HYBRID", "UNGROUNDED")[k % 3],
        "label": None if error else ("EVIDENCE-WARRANTED", "UNGROUNDED")[k % 2],
        "violation_kinds": [KINDS[k % 2]] if k % 5 == 0 else [],
        "quantifier_intensity": ("SINGULAR", "UNIVERSAL")[k % 2],
        "endpoint": f"http://sim{k % 3}:8000", "error": error,
        "error_kind": "llm" if error else None,
        "gold_in_claims": (None, True, False)[k % 3] if k % 4 else None,
        "timings": {"total_ms": 100.0 + (k * 37) % 50} if k % 6 else {},
        "usage": {"prompt_tokens": 800 + k % 9, "completion_tokens": k % 13} if k % 8 else None,
        "llm_request": {"sent_at": 1_700_000_000.0 + k, "ms": 90.0, "prompts": 1} if k % 8 else None,
        # Every third answer kept; some end in "[E", so "[e\"the" spans two rows' answers.
        "answer": None if k % 3 else ANSWER.format(k % 4) + ("ÉTÉ [E" if k % 9 == 0 else "3]"),
    }


def plain_match(r: dict[str, Any], f: dict[str, str]) -> bool:
    """What each filter means, written out over the row itself."""
    verdict, error, gold = r["verdict"] or "", r["error"] or "", r["gold_in_claims"]
    answer = r["answer"] or ""
    checks = {
        "mode": lambda w: r["mode"] == w, "label": lambda w: (r["label"] or "") == w,
        "verdict": lambda w: not verdict if w == "none" else verdict == w,
        "kind": lambda w: w in r["violation_kinds"],
        "intensity": lambda w: r["quantifier_intensity"] == w,
        "endpoint": lambda w: r["endpoint"] == w,
        "error_kind": lambda w: (r["error_kind"] or "") == w,
        "error": lambda w: bool(error) if w == "any" else w.lower() in error.lower(),
        "gold": lambda w: w in ("match", "miss", "none")
        and gold is {"match": True, "miss": False, "none": None}[w],
        "failures": lambda w: bool(error) or not verdict or verdict == "UNGROUNDED"
        or gold is False,
        "q": lambda w: w.casefold() in r["question"].casefold()
        or w.casefold() in answer.casefold(),
        "qid": lambda w: r["question_id"] == w,
    }
    return all(checks[k](w) for k, w in f.items() if w)


def plain_value(r: dict[str, Any], key: str) -> Any:
    """Each sort column's value, written out over the row itself (None: no value)."""
    usage, timings = r["usage"] or {}, r["timings"]
    tokens = None if not usage else usage["prompt_tokens"] + usage["completion_tokens"]
    gold = r["gold_in_claims"]
    return {
        "question_id": r["question_id"], "question": r["question"].casefold(),
        "mode": r["mode"], "sample_index": r["sample_index"], "verdict": r["verdict"],
        "label": r["label"], "kinds": " ".join(r["violation_kinds"]) or None,
        "intensity": r["quantifier_intensity"], "endpoint": r["endpoint"],
        "latency": timings.get("total_ms"), "tokens": tokens,
        "gold": None if gold is None else int(gold), "error": r["error"],
    }[key]


ROWS = [row(k) for k in range(600)]


def columns(rows: list[dict[str, Any]]) -> RowColumns:
    cols = RowColumns()
    for k, r in enumerate(rows):
        cols.append(k * 100, r)
    return cols


def test_entries_read_back_as_written() -> None:
    cols = columns(ROWS[:300])
    e = cols[11]
    assert (e.offset, e.question_id, e.mode, e.verdict, e.error, e.sample_index, e.gold) == (
        1100, "q11", "claim_lattice", "", "llm: endpoint timed out", 2, False)
    assert (e.total_ms, e.tokens, e.is_failure) == (100.0 + 11 * 37 % 50, 800 + 2 + 11, True)
    assert cols[5].kinds == ("NO_EVIDENCE_POINTER",) and len(cols) == 300
    assert cols[6].total_ms is None and cols[8].tokens is None and cols[1].gold is True
    assert [x.offset for x in cols[2:4]] == [200, 300] and cols[-1].offset == 29900
    with pytest.raises(IndexError):
        cols[300]


@pytest.mark.parametrize("f", [
    {}, {"mode": "quote"}, {"verdict": "none"}, {"verdict": "STRICT", "mode": "quote"},
    {"kind": "CITATION_MISMATCH"}, {"error": "any"}, {"error": "TIMED"}, {"q": "NUMBER 7?"},
    {"endpoint": "http://sim1:8000", "intensity": "UNIVERSAL"}, {"error_kind": "llm"},
    {"mode": "no such mode"}, {"label": "UNGROUNDED", "kind": "NO_EVIDENCE_POINTER"},
    {"gold": "match"}, {"gold": "miss"}, {"gold": "none"}, {"gold": "bogus"},
    {"failures": "1"}, {"failures": "1", "mode": "quote", "gold": "miss"},
    {"q": "[E3]"}, {"q": "seine"}, {"q": "STRASSE"}, {"q": "ÉTÉ"}, {"q": "été [e3]"}, {"q": 'été [e"the'},
    {"q": "?"}, {"q": "seine", "failures": "1", "error": "any"}, {"q": "no such text"},
    {"q": "\x00"}, {"q": '3]"the'}, {"q": '"'}, {"q": "1]été [e"},
    {"qid": "q7"}, {"qid": "q7", "mode": "quote"}, {"qid": "q7", "failures": "1"},
    {"qid": "no such id"},
])
def test_filters_pick_the_rows_a_plain_check_picks(f: dict[str, str]) -> None:
    assert set(f) <= set(FILTERS)
    cols = columns(ROWS)
    want = [i for i, r in enumerate(ROWS) if plain_match(r, f)]
    active = {k: v.casefold() if k == "q" else v for k, v in f.items() if v}
    assert list(cols.select(active)) == want


@pytest.mark.parametrize("key", sorted(SORTS))
@pytest.mark.parametrize("descending", [False, True])
def test_every_sort_orders_as_a_plain_sort(key: str, descending: bool) -> None:
    cols = columns(ROWS)
    picked = list(cols.select({"mode": "quote"}))
    have = [p for p in picked if plain_value(ROWS[p], key) is not None]
    missing = [p for p in picked if plain_value(ROWS[p], key) is None]
    have.sort(key=lambda p: plain_value(ROWS[p], key), reverse=descending)
    assert list(sort_positions(cols, picked, key, descending)) == have + missing


def index_bytes(count: int) -> int:
    rows = [row(k) for k in range(count)]
    tracemalloc.start()
    try:
        cols = columns(rows)
        held = tracemalloc.get_traced_memory()[0]
        assert len(cols) == count
        return held
    finally:
        tracemalloc.stop()


def test_memory_grows_by_a_bounded_amount_a_row() -> None:
    small, large = index_bytes(2_000), index_bytes(20_000)
    per_row = (large - small) / 18_000
    answer = sum(len((r["answer"] or "").encode()) for r in ROWS) / len(ROWS)
    # 52 bytes of codes and numbers a row (arrays grow by up to a sixteenth at a time)
    # plus the kept answer's casefolded bytes and a NUL; an object per row took 310-375.
    assert per_row < 62 + (answer + 1) * 1.15, (per_row, answer)
