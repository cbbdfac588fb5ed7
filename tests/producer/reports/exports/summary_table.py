"""Reading summary.md's per-mode table back, to hold an export's numbers against it."""

from __future__ import annotations

import re


def summary_mode_table(summary: str) -> dict[str, dict[str, str]]:
    """summary.md's 'Verdicts by mode' table: mode -> column -> cell."""
    section = summary.split("## Verdicts by mode", 1)[1].lstrip("\n")
    lines = section.split("\n\n", 1)[0].splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    table = {}
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        table[cells[0].strip("`")] = dict(zip(header, cells, strict=True))
    return table


def percent_cell(cell: str) -> tuple[float, float, float]:
    """``60.0% [38.7–78.1]`` -> (60.0, 38.7, 78.1)."""
    m = re.fullmatch(r"([\d.]+)% \[([\d.]+)–([\d.]+)\]", cell)
    assert m, cell
    return float(m[1]), float(m[2]), float(m[3])
