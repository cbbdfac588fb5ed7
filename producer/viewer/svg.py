"""The viewer's plots, drawn by the page itself: inline SVG made here, no script, no library.

Each plot is one ``<svg role="img">`` whose ``<title>`` and ``<desc>`` say what it
shows (its ``aria-labelledby`` names them), and each mark carries a ``<title>`` with
its numbers, so a screen reader or a hover reads what the eye sees; the page prints
the same numbers as a table beside every plot. Every label is text from a run
(question text is untrusted) and goes through ``h``: a question cannot add markup.

Plots are sized in the SVG's own units (``viewBox``) and scale down with the page.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from qfarm.common.vocab import Verdict
from qfarm.producer.viewer.html import h

# Outcome colours (the row's verdict, or an error row), as the summary's plots use them.
OUTCOME_COLORS = {Verdict.STRICT: "#2a9d4b", Verdict.HYBRID: "#e0a030",
                  Verdict.UNGROUNDED: "#c0392b", "error": "#8c8c8c"}
OUTCOME_LETTERS = {Verdict.STRICT: "S", Verdict.HYBRID: "H", Verdict.UNGROUNDED: "U", "error": "E"}
SERIES_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#8172b3", "#937860", "#da8bc3")
EFFECT_COLORS = {"better": "#2a9d4b", "worse": "#c0392b"}
NOISE_COLOR = "#7f7f7f"
FONT = 'font-family="system-ui, sans-serif" font-size="12"'
LABEL_W = 190  # room for a row's label, left of the plot area
FOREST_LABEL_W = 330  # a delta's label names its mode and metric
PLOT_W = 460
ROW_H = 22


@dataclass(frozen=True)
class Segment:
    """One part of a stacked bar: an outcome and its rows."""

    name: str
    count: int


@dataclass(frozen=True)
class ForestItem:
    """One delta of a comparison: points (B − A) and its 95% interval."""

    label: str
    delta: float
    low: float
    high: float
    effect: str  # "better" / "worse" for a signal, "" for noise


def _short(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"


def _svg(key: str, width: float, height: float, title: str, desc: str, body: str) -> str:
    return (
        f'<svg class="chart" id="{h(key)}" role="img" aria-labelledby="{h(key)}-t {h(key)}-d" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" height="{height:.0f}" '
        f'xmlns="http://www.w3.org/2000/svg" {FONT}>'
        f'<title id="{h(key)}-t">{h(title)}</title><desc id="{h(key)}-d">{h(desc)}</desc>'
        f"{body}</svg>"
    )


def _legend(items: Sequence[tuple[str, str]], x: float, y: float) -> str:
    out, at = [], x
    for name, color in items:
        out.append(f'<rect x="{at:.0f}" y="{y - 10:.0f}" width="12" height="12" fill="{color}"/>'
                   f'<text x="{at + 16:.0f}" y="{y:.0f}">{h(name)}</text>')
        at += 34 + 7.5 * len(name)
    return f'<g class="legend">{"".join(out)}</g>'


def _pct(k: int, n: int) -> str:
    return f"{100 * k / n:.1f}%" if n else "—"


def verdict_bars(key: str, bars: Sequence[tuple[str, Sequence[Segment]]], title: str) -> str:
    """One bar per mode, its length all its rows, split by outcome (STRICT, HYBRID,
    UNGROUNDED, error): the verdict distribution, errors in it."""
    top = 8
    height = top + ROW_H * len(bars) + 44
    body = []
    for i, (label, segments) in enumerate(bars):
        y = top + i * ROW_H
        total = sum(s.count for s in segments)
        body.append(f'<text x="{LABEL_W - 6}" y="{y + 15}" text-anchor="end">'
                    f"{h(_short(label, 26))}<title>{h(label)}</title></text>")
        x = float(LABEL_W)
        for s in segments:
            if not s.count:
                continue
            w = PLOT_W * s.count / total
            tip = f"{label}: {s.name} {s.count} of {total} rows ({_pct(s.count, total)})"
            body.append(
                f'<g class="seg" data-bar="{h(label)}" data-outcome="{h(s.name)}" '
                f'data-count="{s.count}">'
                f'<rect x="{x:.2f}" y="{y + 2}" width="{w:.2f}" height="{ROW_H - 4}" '
                f'fill="{OUTCOME_COLORS.get(s.name, NOISE_COLOR)}"><title>{h(tip)}</title></rect>'
                + (f'<text x="{x + w / 2:.1f}" y="{y + 15}" text-anchor="middle" fill="#fff">'
                   f"{s.count}</text>" if w >= 8 * len(str(s.count)) + 4 else "")
                + "</g>")
            x += w
        if not total:
            body.append(f'<text x="{LABEL_W + 4}" y="{y + 15}" fill="#777">no rows yet</text>')
    base = top + ROW_H * len(bars)
    for frac in (0.0, 0.5, 1.0):
        x = LABEL_W + PLOT_W * frac
        body.append(f'<line x1="{x:.0f}" y1="{top}" x2="{x:.0f}" y2="{base + 4}" '
                    f'stroke="#999" stroke-width="0.6"/><text x="{x:.0f}" y="{base + 16}" '
                    f'text-anchor="middle" fill="#555">{100 * frac:.0f}%</text>')
    body.append(_legend([(n, OUTCOME_COLORS[n]) for n in OUTCOME_COLORS], LABEL_W, base + 36))
    desc = "; ".join(
        f"{label}: " + ", ".join(f"{s.name} {s.count}" for s in segs) for label, segs in bars)
    return _svg(key, LABEL_W + PLOT_W + 20, height, title, desc, "".join(body))


def _ticks(limit: float) -> list[float]:
    step = next(s for s in (1, 2, 5, 10, 20, 25, 50) if limit / s <= 5)
    n = int(limit // step)
    return [k * step for k in range(-n, n + 1)]


def forest(key: str, items: Sequence[ForestItem], floor: float, title: str) -> str:
    """Each delta as a point with its interval, against the ±floor band (the design's
    decision floor): the compare page's deltas at a glance. Intervals reaching past
    ±100 points are cut at the edge, their ends marked with an arrow."""
    reach = max([abs(v) for it in items for v in (it.low, it.high, it.delta)] + [2 * floor, 5.0])
    limit = min(100.0, reach * 1.08)
    top, height = 8, 8 + ROW_H * len(items) + 48

    def x_of(v: float) -> float:
        v = max(-limit, min(limit, v))
        return FOREST_LABEL_W + PLOT_W * (v + limit) / (2 * limit)

    base = top + ROW_H * len(items)
    body = [f'<rect class="floor" x="{x_of(-floor):.2f}" y="{top}" '
            f'width="{x_of(floor) - x_of(-floor):.2f}" height="{base - top}" fill="#dddddd">'
            f"<title>±{floor:g} points: the floor a delta must clear to count as a signal"
            "</title></rect>"]
    for t in _ticks(limit):
        x = x_of(t)
        body.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{base + 4}" '
                    f'stroke="{"#000" if t == 0 else "#ccc"}" stroke-width="{1 if t == 0 else 0.5}"/>'
                    f'<text x="{x:.1f}" y="{base + 16}" text-anchor="middle" fill="#555">'
                    f"{t:+g}</text>")
    for i, it in enumerate(items):
        y = top + i * ROW_H + ROW_H / 2
        color = EFFECT_COLORS.get(it.effect, NOISE_COLOR)
        verdict = f"signal, {it.effect}" if it.effect in EFFECT_COLORS else "noise"
        tip = (f"{it.label}: Δ {it.delta:+.1f} points, 95% interval "
               f"[{it.low:+.1f}, {it.high:+.1f}], {verdict}")
        arrows = "".join(
            f'<path d="M{x_of(end):.1f},{y - 4:.1f} l{6 * side},4 l{-6 * side},4" fill="none" '
            f'stroke="{color}"/>'
            for end, side in ((it.low, -1), (it.high, 1)) if abs(end) > limit)
        body.append(
            f'<g class="fp-row" data-effect="{h(it.effect or "noise")}">'
            f"<title>{h(tip)}</title>"
            f'<text x="{FOREST_LABEL_W - 6}" y="{y + 4:.1f}" text-anchor="end">'
            f"{h(_short(it.label, 46))}</text>"
            f'<line class="ci" x1="{x_of(it.low):.2f}" y1="{y:.1f}" x2="{x_of(it.high):.2f}" '
            f'y2="{y:.1f}" stroke="{color}" stroke-width="2"/>{arrows}'
            f'<circle cx="{x_of(it.delta):.2f}" cy="{y:.1f}" r="4" fill="{color}"/></g>')
    body.append(f'<text x="{FOREST_LABEL_W + PLOT_W / 2:.0f}" y="{base + 34}" text-anchor="middle" '
                'fill="#333">Δ = B − A in points, 95% interval; grey band: the floor</text>')
    desc = "; ".join(f"{it.label} {it.delta:+.1f} [{it.low:+.1f}, {it.high:+.1f}]"
                     for it in items)
    return _svg(key, FOREST_LABEL_W + PLOT_W + 20, height, title, desc, "".join(body))


def heatmap(key: str, columns: Sequence[str],
            rows: Sequence[tuple[str, Sequence[dict[str, int] | None]]], title: str,
            links: Sequence[Sequence[str]] | None = None) -> str:
    """Questions down, modes across; each cell coloured by its most frequent outcome, darker
    the larger its share, and lettered (S, H, U, E) so colour is not the only cue. With
    ``links`` (a URL per cell, row by row) a cell with rows opens them."""
    cell_w, cell_h, top = 130, 16, 22
    width = LABEL_W + cell_w * len(columns) + 20
    height = top + cell_h * len(rows) + 36
    body = [f'<text x="{LABEL_W + cell_w * (j + 0.5):.0f}" y="{top - 8}" text-anchor="middle">'
            f"{h(_short(c, 20))}<title>{h(c)}</title></text>" for j, c in enumerate(columns)]
    for i, (label, cells) in enumerate(rows):
        y = top + i * cell_h
        body.append(f'<text x="{LABEL_W - 6}" y="{y + 12}" text-anchor="end">'
                    f"{h(_short(label, 26))}<title>{h(label)}</title></text>")
        for j, counts in enumerate(cells):
            x = LABEL_W + j * cell_w
            total = sum(counts.values()) if counts else 0
            if not counts or not total:
                body.append(f'<rect class="cell" data-outcome="" x="{x}" y="{y}" '
                            f'width="{cell_w - 2}" height="{cell_h - 2}" fill="#f2f2f2">'
                            f"<title>{h(label)} · {h(columns[j])}: no rows</title></rect>")
                continue
            top_name = max(OUTCOME_COLORS, key=lambda n: (counts.get(n, 0), n == Verdict.STRICT))
            share = counts.get(top_name, 0) / total
            parts = ", ".join(f"{n} {counts.get(n, 0)}" for n in OUTCOME_COLORS)
            href = links[i][j] if links else ""
            body.append(
                (f'<a href="{h(href)}">' if href else "")
                + f'<g class="cell" data-outcome="{top_name}"><title>{h(label)} · '
                f"{h(columns[j])}: {h(parts)}</title>"
                f'<rect x="{x}" y="{y}" width="{cell_w - 2}" height="{cell_h - 2}" '
                f'fill="{OUTCOME_COLORS[top_name]}" fill-opacity="{0.35 + 0.65 * share:.2f}"/>'
                f'<text x="{x + cell_w / 2 - 1:.0f}" y="{y + 12}" text-anchor="middle" '
                f'font-size="11">{OUTCOME_LETTERS[top_name]} {counts.get(top_name, 0)}/{total}'
                "</text></g>" + ("</a>" if href else ""))
    body.append(_legend([(f"{OUTCOME_LETTERS[n]} {n}", c) for n, c in OUTCOME_COLORS.items()],
                        LABEL_W, top + cell_h * len(rows) + 26))
    desc = (f"{len(rows)} questions × {len(columns)} modes; each cell names its most frequent "
            "outcome and how many of the cell's rows had it.")
    return _svg(key, width, height, title, desc, "".join(body))


def grouped_bars(key: str, series: Sequence[str],
                 groups: Sequence[tuple[str, Sequence[tuple[int, int]]]], title: str) -> str:
    """One group per label (a violation kind), one bar per series (a mode): the share of that
    series' rows (``(count, of)`` per series) carrying it, the count at the bar's end."""
    bar_h, gap, top = 12, 8, 8
    group_h = bar_h * len(series) + gap
    height = top + group_h * len(groups) + 48
    body = []
    for i, (label, values) in enumerate(groups):
        y0 = top + i * group_h
        body.append(f'<text x="{LABEL_W - 6}" y="{y0 + group_h / 2 + 2:.0f}" text-anchor="end">'
                    f"{h(_short(label, 26))}<title>{h(label)}</title></text>")
        for j, (count, of) in enumerate(values):
            y = y0 + j * bar_h
            w = PLOT_W * count / of if of else 0.0
            tip = f"{label} in {series[j]}: {count} of {of} answered rows ({_pct(count, of)})"
            body.append(
                f'<g class="bar" data-series="{h(series[j])}" data-count="{count}">'
                f"<title>{h(tip)}</title>"
                f'<rect x="{LABEL_W}" y="{y}" width="{w:.2f}" height="{bar_h - 2}" '
                f'fill="{SERIES_COLORS[j % len(SERIES_COLORS)]}"/>'
                f'<text x="{LABEL_W + w + 4:.1f}" y="{y + 9}" font-size="10" fill="#333">'
                f"{f'{count} ({_pct(count, of)})' if count else '0'}</text></g>")
    base = top + group_h * len(groups)
    body.append(f'<line x1="{LABEL_W}" y1="{top}" x2="{LABEL_W}" y2="{base}" stroke="#999"/>')
    for frac in (0.0, 0.5, 1.0):
        x = LABEL_W + PLOT_W * frac
        body.append(f'<text x="{x:.0f}" y="{base + 14}" text-anchor="middle" fill="#555">'
                    f"{100 * frac:.0f}%</text>")
    body.append(_legend([(s, SERIES_COLORS[j % len(SERIES_COLORS)])
                         for j, s in enumerate(series)], LABEL_W, base + 36))
    desc = "; ".join(f"{label}: " + ", ".join(f"{s} {c} of {n}" for s, (c, n)
                                              in zip(series, values, strict=False))
                     for label, values in groups)
    return _svg(key, LABEL_W + PLOT_W + 90, height, title, desc, "".join(body))
