"""The rows table's export: the filtered (and sorted) rows as CSV or JSONL, streamed.

Rows are read one at a time through the index's byte offsets (``RunRows.raw_rows``),
so a 100k-row export holds one row in memory, and the first bytes leave before the
last row is read. JSONL is each row's line as the run wrote it; CSV has one column
per field the table shows plus the row's figures and, when kept, the answer.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from qfarm.producer.reports.rows import parse_row
from qfarm.producer.viewer.index import RunRows

# (CSV header, how to read it from a row): flat fields of the row (docs/grounding.md, 'The row').
COLUMNS: tuple[tuple[str, str], ...] = (
    ("run_id", "run_id"), ("job_id", "job_id"), ("question_id", "question_id"),
    ("question", "question"), ("mode", "mode"), ("sample_index", "sample_index"),
    ("verdict", "verdict"), ("label", "label"), ("ratio", "ratio"), ("n_claims", "n_claims"),
    ("n_verified", "n_verified"), ("violation_kinds", "violation_kinds"),
    ("quantifier_intensity", "quantifier_intensity"), ("endpoint", "endpoint"),
    ("total_ms", "timings.total_ms"), ("llm_ms", "timings.llm_ms"),
    ("prompt_tokens", "usage.prompt_tokens"), ("completion_tokens", "usage.completion_tokens"),
    ("gold_in_claims", "gold_in_claims"), ("gold_in_evidence", "gold_in_evidence"),
    ("cache_hit", "cache_hit"), ("attempts", "attempts"), ("error_kind", "error_kind"),
    ("error", "error"), ("answer", "answer"),
)
# A cell a spreadsheet would run as a formula starts with one of these; model output and
# questions are untrusted, so such text cells get a leading apostrophe (OWASP's advice).
FORMULA_START = "=+-@\t\r"
BATCH_ROWS = 200  # rows per piece of the streamed body
_PATHS = tuple(tuple(path.split(".")) for _, path in COLUMNS)


def _cell(row: Mapping[str, Any], path: tuple[str, ...]) -> str:
    value = row.get(path[0])
    for part in path[1:]:
        value = value.get(part) if isinstance(value, dict) else None
    kind = type(value)
    if isinstance(value, str):
        return "'" + value if value and value[0] in FORMULA_START else value
    if value is None:
        return ""
    if kind is bool:
        return "true" if value else "false"
    if kind is list:
        return " ".join(str(v) for v in value)
    return str(value)


def csv_rows(rr: RunRows, positions: Sequence[int]) -> Iterator[bytes]:
    """The CSV export: a header line, then one line per row (UTF-8, RFC 4180 quoting)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\r\n")
    writer.writerow(["position", *(name for name, _ in COLUMNS)])
    for k, (pos, raw) in enumerate(zip(positions, rr.raw_rows(positions), strict=False), 1):
        row = parse_row(raw) or {}
        writer.writerow([str(pos), *(_cell(row, path) for path in _PATHS)])
        if k % BATCH_ROWS == 0:
            yield buf.getvalue().encode()
            buf.seek(0)
            buf.truncate()
    yield buf.getvalue().encode()


def jsonl_rows(rr: RunRows, positions: Sequence[int]) -> Iterator[bytes]:
    """The JSONL export: each row as the run wrote it, one per line."""
    piece: list[bytes] = []
    for raw in rr.raw_rows(positions):  # the index holds only lines that parsed
        piece.append(raw + b"\n")
        if len(piece) == BATCH_ROWS:
            yield b"".join(piece)
            piece = []
    if piece:
        yield b"".join(piece)
