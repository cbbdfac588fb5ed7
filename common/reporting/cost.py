"""What a run cost: tokens, model time, GPU-hours and an estimated price, from its rows.

One streaming pass, like ``runstats`` (``RunStats.cost`` is a ``CostStats``): per run,
per mode and per endpoint, the prompt and completion tokens, how many rows' counts
are qfarm's estimate (the server gave no ``usage``), the *model seconds* (the sum of
the durations of the requests that answered, a micro-batch's counted once) and the
*in-flight seconds* (the time at least one of those requests was open: the union of
their intervals). Tokens per second are given over the run's wall time and over the
in-flight time. GPU-hours are an endpoint's GPUs times its in-flight hours; prices
come from the rates the manifest recorded (``CostRates``). The rules:
docs/reports.md, 'What a run cost'.

Rows served from the result cache and rows without a model call cost nothing here.
Rows whose reply came from the response cache (``--cache``) cost nothing either: their
tokens and the model time their reply first took are counted apart, as what the cache
saved (``CostStats.saved``).
Memory is bounded: the in-flight union keeps at most ``MAX_SPANS`` disjoint spans, and
past that joins the two closest (the joined gap is reported as ``over_s``).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from qfarm.common.errors import InputError
from qfarm.common.models import CostRates

MAX_SPANS = 4096
MAX_ENDPOINTS = 50
TOTAL = "(all)"


class BusyTime:
    """The union of time intervals, in seconds, kept as sorted disjoint spans."""

    __slots__ = ("starts", "ends", "over_s")

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.over_s = 0.0  # gaps counted as busy to stay under MAX_SPANS (an over-estimate)

    def add(self, start: float, end: float) -> None:
        if end < start:
            start, end = end, start
        ends = self.ends
        if ends and self.starts[-1] <= start <= ends[-1]:
            # The usual case (requests overlap, rows come roughly in order): it extends the last span.
            if end > ends[-1]:
                ends[-1] = end
            return
        # Every span that touches [start, end] merges into it.
        lo = bisect.bisect_left(self.ends, start)
        hi = bisect.bisect_right(self.starts, end)
        if lo < hi:
            start = min(start, self.starts[lo])
            end = max(end, self.ends[hi - 1])
        self.starts[lo:hi] = [start]
        self.ends[lo:hi] = [end]
        if len(self.starts) > MAX_SPANS:
            self._join_closest()

    def _join_closest(self) -> None:
        gaps = [self.starts[i + 1] - self.ends[i] for i in range(len(self.starts) - 1)]
        i = min(range(len(gaps)), key=gaps.__getitem__)
        self.over_s += gaps[i]
        self.ends[i] = self.ends[i + 1]
        del self.starts[i + 1], self.ends[i + 1]

    @property
    def seconds(self) -> float:
        return sum(e - s for s, e in zip(self.starts, self.ends, strict=True))


class CostCell:
    """Token and time sums for one group of rows (the run, a mode, or an endpoint)."""

    __slots__ = ("rows", "prompt_tokens", "completion_tokens", "estimated_rows", "model_s", "busy")

    def __init__(self) -> None:
        self.rows = 0  # rows whose answer came from a model call
        self.prompt_tokens = self.completion_tokens = 0
        self.estimated_rows = 0  # rows whose token counts are qfarm's estimate
        self.model_s = 0.0
        self.busy = BusyTime()

    def add(self, prompt: int, completion: int, estimated: bool,
            span: tuple[float, float, float]) -> None:
        """One row: its tokens, and (start, end, its share of the request's seconds)."""
        self.rows += 1
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        self.estimated_rows += estimated
        self.model_s += span[2]
        self.busy.add(span[0], span[1])


@dataclass
class SavedByCache:
    """Replies the response cache gave a run: no request was made for them, and what they
    first cost (tokens, model seconds) was spent by an earlier run."""

    rows: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_s: float = 0.0

    def add(self, row: Mapping[str, Any]) -> None:
        usage = row.get("usage") or {}
        self.rows += 1
        self.prompt_tokens += int(usage.get("prompt_tokens") or 0)
        self.completion_tokens += int(usage.get("completion_tokens") or 0)
        self.model_s += float(row.get("model_ms_saved") or 0.0) / 1000.0

    def as_json(self) -> dict[str, Any]:
        return {"rows": self.rows, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "model_s": round(self.model_s, 3)}


class CostStats:
    """``CostCell`` per run, mode and endpoint, filled one row at a time."""

    def __init__(self) -> None:
        self.total = CostCell()
        self.modes: dict[str, CostCell] = {}
        self.endpoints: dict[str, CostCell] = {}
        self.saved = SavedByCache()

    def add(self, row: Mapping[str, Any]) -> None:
        if row.get("cache_hit"):
            return  # re-issued from the cache: no model call in this run
        if row.get("response_cache_hit") and not row.get("error"):
            self.saved.add(row)  # the reply was stored: no model call in this run
            return
        usage = row.get("usage") or {}
        request = row.get("llm_request")
        has_tokens = usage.get("prompt_tokens") is not None or usage.get("completion_tokens") is not None
        if request is None:
            if has_tokens:  # every row a model answered names its request
                raise InputError(
                    f"row {row.get('job_id')} has token usage but no llm_request, which every "
                    "row a model answered carries: its rows.jsonl was not written by this qfarm")
            return  # no model call answered this job
        mode = str(row.get("mode"))
        endpoint = str(row.get("endpoint") or "(none)")
        if endpoint not in self.endpoints and len(self.endpoints) >= MAX_ENDPOINTS:
            endpoint = "(other)"
        prompt = int(usage.get("prompt_tokens") or 0)
        completion = int(usage.get("completion_tokens") or 0)
        estimated = bool(usage.get("estimated"))
        seconds = float(request.get("ms") or 0.0) / 1000.0
        sent = float(request.get("sent_at") or 0.0)
        span = (sent, sent + seconds, seconds / max(1, int(request.get("prompts") or 1)))
        for cell in (self.total, self.modes.get(mode) or self.modes.setdefault(mode, CostCell()),
                     self.endpoints.get(endpoint) or self.endpoints.setdefault(endpoint, CostCell())):
            cell.add(prompt, completion, estimated, span)


@dataclass(frozen=True)
class CostLine:
    """One line of the cost table (also its JSON in the manifest and the API)."""

    scope: str  # "run", "mode" or "endpoint"
    name: str
    rows: int
    prompt_tokens: int
    completion_tokens: int
    estimated_rows: int  # rows whose tokens are estimated (the server gave no usage)
    model_s: float
    in_flight_s: float
    prompt_tokens_per_s_wall: float | None
    completion_tokens_per_s_wall: float | None
    prompt_tokens_per_s_in_flight: float | None
    completion_tokens_per_s_in_flight: float | None
    gpus: float | None = None
    gpu_hours: float | None = None
    price_gpu: float | None = None  # GPU-hours × the price per GPU-hour
    price_tokens: float | None = None  # tokens × the prices per million tokens

    @property
    def estimated(self) -> bool:
        return self.estimated_rows > 0


def _rate(tokens: int, seconds: float | None) -> float | None:
    return round(tokens / seconds, 3) if seconds and seconds > 0 else None


def _round(x: float | None, digits: int = 6) -> float | None:
    return None if x is None else round(x, digits)


def _token_price(cell: CostCell, rates: CostRates) -> float | None:
    p, c = rates.price_per_m_prompt_tokens, rates.price_per_m_completion_tokens
    if p is None and c is None:
        return None
    return (cell.prompt_tokens * (p or 0.0) + cell.completion_tokens * (c or 0.0)) / 1e6


def _line(scope: str, name: str, cell: CostCell, wall_s: float | None, rates: CostRates,
          gpus: float | None = None) -> CostLine:
    busy = cell.busy.seconds
    gpu_hours = gpus * busy / 3600.0 if gpus is not None else None
    return CostLine(
        scope=scope, name=name, rows=cell.rows, prompt_tokens=cell.prompt_tokens,
        completion_tokens=cell.completion_tokens, estimated_rows=cell.estimated_rows,
        model_s=round(cell.model_s, 3), in_flight_s=round(busy, 3),
        prompt_tokens_per_s_wall=_rate(cell.prompt_tokens, wall_s),
        completion_tokens_per_s_wall=_rate(cell.completion_tokens, wall_s),
        prompt_tokens_per_s_in_flight=_rate(cell.prompt_tokens, busy),
        completion_tokens_per_s_in_flight=_rate(cell.completion_tokens, busy),
        gpus=gpus, gpu_hours=_round(gpu_hours),
        price_gpu=_round(gpu_hours * rates.price_per_gpu_hour
                         if gpu_hours is not None and rates.price_per_gpu_hour is not None
                         else None),
        price_tokens=_round(_token_price(cell, rates)),
    )


def cost_lines(stats: CostStats, rates: CostRates, wall_s: float | None,
               modes: list[str] | None = None) -> list[CostLine]:
    """The cost table: the run first, then each mode (in ``modes`` order), then each endpoint.

    The run's GPU-hours are the endpoints' sum, given only when every endpoint's GPUs
    are known (a partial sum would pass for the whole).
    """
    endpoint_lines = [_line("endpoint", name, cell, wall_s, rates, rates.gpus_for(name))
                      for name, cell in sorted(stats.endpoints.items())]
    total = _line("run", TOTAL, stats.total, wall_s, rates)
    if endpoint_lines and all(e.gpu_hours is not None for e in endpoint_lines):
        gpu_hours = sum(e.gpu_hours or 0.0 for e in endpoint_lines)
        prices = [e.price_gpu for e in endpoint_lines]
        total = CostLine(**{
            **asdict(total), "gpus": sum(e.gpus or 0.0 for e in endpoint_lines),
            "gpu_hours": _round(gpu_hours),
            "price_gpu": None if None in prices else _round(sum(p or 0.0 for p in prices)),
        })
    order = [m for m in (modes or []) if m in stats.modes]
    order += [m for m in stats.modes if m not in order]
    return [total, *(_line("mode", m, stats.modes[m], wall_s, rates) for m in order),
            *endpoint_lines]


def cost_summary(stats: CostStats, rates: CostRates, wall_s: float | None,
                 modes: list[str] | None = None) -> dict[str, Any]:
    """The cost table as JSON (the manifest's ``cost``, the API's): lines, rates and notes."""
    lines = cost_lines(stats, rates, wall_s, modes)
    return {
        "wall_s": None if wall_s is None else round(wall_s, 3),
        "currency": rates.currency,
        "rates": rates.model_dump(mode="json"),
        "estimated": stats.total.estimated_rows > 0,
        "lines": [{**asdict(line), "estimated": line.estimated} for line in lines],
        "notes": cost_notes(stats),
        # Only runs the response cache answered say so: other runs' cost stays as it was.
        **({"response_cache": stats.saved.as_json()} if stats.saved.rows else {}),
    }


def cost_notes(stats: CostStats) -> list[str]:
    """What the reader must know to trust the table: estimates, joined spans."""
    t = stats.total
    notes = []
    if t.estimated_rows:
        notes.append(
            f"{t.estimated_rows} of {t.rows} rows: the server's reply had no token usage; "
            "their tokens are ESTIMATED (characters / 4)."
        )
    saved = stats.saved
    if saved.rows:
        notes.append(
            f"{saved.rows} rows' replies came from the response cache (--cache): no request "
            f"was made for them, and the table leaves them out. Saved: {saved.prompt_tokens:,} "
            f"prompt + {saved.completion_tokens:,} completion tokens and {saved.model_s:,.1f} "
            "s of model time, spent by the run that first asked.")
    over = max((c.busy.over_s for c in (t, *stats.endpoints.values())), default=0.0)
    if over > 0:
        notes.append(f"in-flight time is over-estimated by at most {over:.1f} s (gaps between "
                     f"requests joined to keep {MAX_SPANS} spans).")
    return notes


# --------------------------------------------------------------------------- rendering


def cost_line(cost: Mapping[str, Any]) -> str:
    """One line of a ``cost_summary`` for a terminal (``qfarm status RUN``)."""
    run = (cost.get("lines") or [{}])[0]
    if not run.get("rows"):
        return "cost: no model calls yet"
    text = (f"cost: {run['prompt_tokens']:,} prompt + {run['completion_tokens']:,} completion "
            f"tokens over {run['rows']} rows")
    if run.get("estimated_rows"):
        text += f" ({run['estimated_rows']} rows ESTIMATED: no usage from the server)"
    text += (f", model {run['model_s']:,.1f} s, in flight {run['in_flight_s']:,.1f} s, "
             f"{_fmt(run.get('completion_tokens_per_s_in_flight'), 1)} completion tok/s in flight")
    if run.get("gpu_hours") is not None:
        text += f", {run['gpu_hours']:,.4f} GPU-h"
    prices = [p for p in (run.get("price_gpu"), run.get("price_tokens")) if p is not None]
    if prices:
        text += ", est. " + " + ".join(f"{p:,.4f}" for p in prices) + f" {cost.get('currency')}"
    return text


def _fmt(x: float | None, digits: int = 0) -> str:
    return "—" if x is None else f"{x:,.{digits}f}"


def _pair(a: float | None, b: float | None) -> str:
    return f"{_fmt(a, 1)} / {_fmt(b, 1)}"


COST_HEADER = [
    "", "rows", "prompt tokens", "completion tokens", "tokens from", "model s", "in flight s",
    "prompt tok/s (wall / in flight)", "completion tok/s (wall / in flight)", "GPUs",
    "GPU-hours", "est. price",
]


def cost_cells(line: CostLine, currency: str) -> list[str]:
    """One line of the table as text cells (the summary's markdown and the viewer's HTML)."""
    name = {"run": "run", "mode": f"mode {line.name}", "endpoint": line.name}[line.scope]
    source = ("server" if not line.estimated_rows else
              "ESTIMATED" if line.estimated_rows == line.rows else
              f"server; {line.estimated_rows} rows ESTIMATED")
    prices = [p for p in (line.price_gpu, line.price_tokens) if p is not None]
    price = " + ".join(f"{p:,.4f}" for p in prices)
    return [
        name, str(line.rows), f"{line.prompt_tokens:,}", f"{line.completion_tokens:,}", source,
        _fmt(line.model_s, 1), _fmt(line.in_flight_s, 1),
        _pair(line.prompt_tokens_per_s_wall, line.prompt_tokens_per_s_in_flight),
        _pair(line.completion_tokens_per_s_wall, line.completion_tokens_per_s_in_flight),
        _fmt(line.gpus, 0 if line.gpus is None or line.gpus == int(line.gpus) else 2),
        _fmt(line.gpu_hours, 4), f"{price} {currency}" if prices else "—",
    ]


def price_note(rates: CostRates) -> str:
    """How the price column was made, or how to get one."""
    parts = []
    if rates.price_per_gpu_hour is not None:
        parts.append(f"{rates.price_per_gpu_hour:g} {rates.currency} per GPU-hour × GPU-hours")
    if rates.price_per_m_prompt_tokens is not None or rates.price_per_m_completion_tokens is not None:
        parts.append(f"{rates.price_per_m_prompt_tokens or 0:g} / "
                     f"{rates.price_per_m_completion_tokens or 0:g} {rates.currency} per million "
                     "prompt / completion tokens")
    if not parts:
        return ("No price: set QFARM_LLM_PRICE_PER_GPU_HOUR (with QFARM_LLM_GPUS_PER_ENDPOINT) or "
                "QFARM_LLM_PRICE_PER_M_PROMPT_TOKENS / _COMPLETION_TOKENS before the run.")
    return "est. price: " + "; ".join(parts) + " (both shown as A + B when both are set)."


def render_cost(lines: list[CostLine], rates: CostRates, notes: list[str], *,
                simulated: bool = False) -> list[str]:
    """The summary's 'What the run cost' section, in markdown lines (no table without rows)."""
    from qfarm.common.reporting.report import md_table  # the one markdown table writer

    out = ["", "## What the run cost" + (" (SIMULATED)" if simulated else ""), ""]
    if simulated:
        out += ["The simulator's token counts and latencies, not a GPU's: they price the "
                "farm's plumbing, not the model.", ""]
    if not lines or lines[0].rows == 0:
        return out + ["No model calls in this run's rows (cache hits and failures cost nothing here)."] + [
            f"- {note}" for note in notes]
    out.append(
        "Tokens from the server's `usage` (ESTIMATED where it gave none); model s: the sum of "
        "the requests' durations; in flight s: the time at least one request was open; "
        "GPU-hours: GPUs × in-flight hours."
    )
    out += [""] + md_table(COST_HEADER, [cost_cells(line, rates.currency) for line in lines])
    out += ["", price_note(rates)]
    out += [f"- {note}" for note in notes]
    return out
