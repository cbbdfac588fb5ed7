"""The viewer's rows index holds columns of codes, not an object per row: filters pick the
same rows as a plain check of each entry, and memory grows by a bounded amount a row."""

from __future__ import annotations

import tracemalloc
from typing import Any

import pytest

from qfarm.producer.viewer.index import FILTERS, RowColumns, RowEntry

MODES = ("quote", "claim_lattice_pointer", "claim_lattice")
KINDS = ("CITATION_MISMATCH", "NO_EVIDENCE_POINTER")


def row(k: int) -> dict[str, Any]:
    error = "llm: endpoint timed out" if k % 11 == 0 else None
    return {
        "question_id": f"q{k % 40}", "question": f"Which river is number {k % 40}?",
        "mode": MODES[k % 3], "sample_index": k // 120,
        "verdict": None if error else ("STRICT", "HYBRID", "UNGROUNDED")[k % 3],
        "label": None if error else ("EVIDENCE-WARRANTED", "UNGROUNDED")[k % 2],
        "violation_kinds": [KINDS[k % 2]] if k % 5 == 0 else [],
        "quantifier_intensity": ("SINGULAR", "UNIVERSAL")[k % 2],
        "endpoint": f"http://sim{k % 3}:8000", "error": error,
        "error_kind": "llm" if error else None,
    }


def plain_match(e: RowEntry, f: dict[str, str]) -> bool:
    """What each filter means, written out per entry."""
    checks = {
        "mode": lambda w: e.mode == w, "label": lambda w: e.label == w,
        "verdict": lambda w: not e.verdict if w == "none" else e.verdict == w,
        "kind": lambda w: w in e.kinds, "intensity": lambda w: e.intensity == w,
        "endpoint": lambda w: e.endpoint == w, "error_kind": lambda w: e.error_kind == w,
        "error": lambda w: bool(e.error) if w == "any" else w.lower() in e.error.lower(),
        "q": lambda w: w.lower() in e.question.lower(),
    }
    return all(checks[k](w) for k, w in f.items() if w)


def test_entries_read_back_as_written() -> None:
    cols = RowColumns()
    for k in range(300):
        cols.append(k * 100, row(k))
    e = cols[11]
    assert (e.offset, e.question_id, e.mode, e.verdict, e.error, e.sample_index) == (
        1100, "q11", "claim_lattice", "", "llm: endpoint timed out", 0)
    assert cols[5].kinds == ("NO_EVIDENCE_POINTER",) and len(cols) == 300
    assert [x.offset for x in cols[2:4]] == [200, 300]


@pytest.mark.parametrize("f", [
    {}, {"mode": "quote"}, {"verdict": "none"}, {"verdict": "STRICT", "mode": "quote"},
    {"kind": "CITATION_MISMATCH"}, {"error": "any"}, {"error": "TIMED"}, {"q": "NUMBER 7?"},
    {"endpoint": "http://sim1:8000", "intensity": "UNIVERSAL"}, {"error_kind": "llm"},
    {"mode": "no such mode"}, {"label": "UNGROUNDED", "kind": "NO_EVIDENCE_POINTER"},
])
def test_filters_pick_the_rows_a_plain_check_picks(f: dict[str, str]) -> None:
    assert set(f) <= set(FILTERS)
    cols = RowColumns()
    for k in range(600):
        cols.append(k, row(k))
    want = [i for i in range(len(cols)) if plain_match(cols[i], f)]
    assert list(cols.select({k: v for k, v in f.items() if v})) == want


def index_bytes(count: int) -> int:
    tracemalloc.start()
    try:
        cols = RowColumns()
        for k in range(count):
            cols.append(k * 500, row(k))
        return tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()


def test_memory_grows_by_a_bounded_amount_a_row() -> None:
    small, large = index_bytes(2_000), index_bytes(20_000)
    per_row = (large - small) / 18_000
    # 52 bytes of codes a row (arrays grow by up to an eighth at a time); an object per
    # row took about 700 bytes.
    assert per_row < 80, per_row
