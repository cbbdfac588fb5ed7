"""A committed real-model run read again: its figures, its rows re-verified, its texts.

``bench/runs/<name>/`` keeps a run of the local CPU model (rows with the answers,
``--keep-answers``), so the verifier, the quantifier guard and the answerability
sidecar can be re-run on what the model actually wrote without running the model
again, and the README's table is computed from the rows rather than typed:

    python -m bench.real_model table bench/runs/smollm2-135m-cpu [--reverified]  # the README table
    python -m bench.real_model reread bench/runs/smollm2-135m-cpu    # rows the code now reads differently
    python -m bench.real_model show bench/runs/smollm2-135m-cpu [--mode M] [--question TEXT]
    python -m bench.real_model habits bench/runs/smollm2-135m-cpu    # what the texts do, by mode
    python -m bench.real_model kinds bench/runs/smollm2-135m-cpu     # violation kinds, by mode

``reread`` fetches each row's passages from the embedded index by id
(``qfarm.producer.viewer.reread``, the row page's path) and verifies the kept answer
under the run's policy; every figure the current code reproduces differently is
listed. It needs the index the run used (``qfarm index`` on the default corpus).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from qfarm.common.grounding.preflight import run_preflight
from qfarm.common.settings import Settings
from qfarm.common.vocab import Mode
from qfarm.producer.rundir import read_manifest
from qfarm.producer.viewer.reread import reread_row

MODES = ("quote", "claim_lattice_pointer", "claim_lattice")
LABELS = ("EVIDENCE-WARRANTED", "ANCHOR-WARRANTED", "POINTER-LINKED", "UNGROUNDED")


def read_rows(run_dir: Path) -> list[dict[str, Any]]:
    """Every row of ``run_dir/rows.jsonl``, in file order."""
    with (run_dir / "rows.jsonl").open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _pct(n: int, d: int) -> str:
    return f"{100 * n / d:.1f} %" if d else "n/a"


def _quantile(values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile (the summary's convention for p50/p95)."""
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))
    return ordered[k]


def service_seconds(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Seconds the one-slot server spent on each job, by job id.

    A row's ``llm_ms`` includes the wait for the server's single slot (an eager sweep
    hands the gateway many jobs at once), so it is not the model's time. The server
    answers one request at a time and the queue stays full, so consecutive rows
    finish one service time apart: a job's service time is its finish less the
    previous finish (the first job's, its finish less its start).
    """
    done = sorted((r for r in rows if r.get("finished_at") and r.get("started_at")),
                  key=lambda r: r["finished_at"])
    out: dict[str, float] = {}
    previous: float | None = None
    for r in done:
        begin = r["started_at"] if previous is None else max(previous, r["started_at"])
        out[r["job_id"]] = r["finished_at"] - begin
        previous = r["finished_at"]
    return out


def mode_figures(
    rows: Sequence[Mapping[str, Any]], mode: str, service: Mapping[str, float] | None = None
) -> dict[str, Any]:
    """One mode's figures over rows without an error (errors counted apart); ``service``
    gives each job's time on the server (``service_seconds`` of the whole run)."""
    service = service_seconds(rows) if service is None else service
    mine = [r for r in rows if r.get("mode") == mode]
    ok = [r for r in mine if not r.get("error") and r.get("verdict")]
    n = len(ok)
    llm_s = [service[r["job_id"]] for r in ok if r.get("job_id") in service]
    tokens = sum((r.get("usage") or {}).get("completion_tokens") or 0 for r in ok)
    labels = Counter(r.get("label") for r in ok)
    return {
        "mode": mode,
        "jobs": len(mine),
        "errors": len(mine) - n,
        "strict": sum(r["verdict"] == "STRICT" for r in ok),
        "hybrid": sum(r["verdict"] == "HYBRID" for r in ok),
        "ungrounded": sum(r["verdict"] == "UNGROUNDED" for r in ok),
        # The done-criterion of structured output: an answer that cites at all.
        "pointed": sum((r.get("answer_pointer_count") or 0) > 0 for r in ok),
        "tokens_per_job": tokens / n if n else None,
        "collapsed": sum(bool(r.get("format_collapsed")) for r in ok),
        "truncated": sum(r.get("finish_reason") == "length" for r in ok),
        "labels": {lab: labels.get(lab, 0) for lab in LABELS},
        "n": n,
        "p50_s": _quantile(llm_s, 0.5) if llm_s else None,
        "p95_s": _quantile(llm_s, 0.95) if llm_s else None,
        # Completion tokens over the server's time, prompt evaluation included: what a user
        # of the server waits for per token of answer, not the decoder's raw speed.
        "tokens_per_s": tokens / sum(llm_s) if llm_s else None,
    }


def reverified_rows(run_dir: Path, index_path: Path | None = None) -> list[dict[str, Any]]:
    """The run's rows with verdict, label, counts and kinds as the current code reads the
    kept answers (rows without an answer, or that cannot be re-read, as recorded)."""
    from qfarm.common.models import ViolationKind

    out = []
    for row, got in _rereads(run_dir, index_path):
        ver = got.verification if got is not None else None
        if ver is None:
            out.append(row)
            continue
        out.append({
            **row,
            "verdict": ver.verdict.value, "label": ver.label.value,
            "n_claims": ver.n_claims, "n_verified": ver.n_verified,
            "violation_kinds": [k.value for k in ver.violation_kinds],
            "format_collapsed": ViolationKind.FORMAT_COLLAPSED in ver.violation_kinds,
        })
    return out


def figures_table(run_dir: Path, *, reverified: bool = False) -> str:
    """The real-model table (markdown) computed from the run's rows and manifest; with
    ``reverified`` the kept answers are verified again by the current code first."""
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    rows = reverified_rows(run_dir) if reverified else read_rows(run_dir)
    head = (
        "| mode | jobs | strict | HYBRID | UNGROUNDED | format collapsed | with a pointer | "
        "cut at max_tokens | "
        + " | ".join(LABELS)
        + " | errors | p50 / p95 server s | tokens a job | tokens/s |\n|"
        + "---|" * (12 + len(LABELS))
        + "\n"
    )
    body = ""
    service = service_seconds(rows)
    for mode in manifest.get("modes") or MODES:
        f = mode_figures(rows, mode, service)
        n = f["n"]
        labels = " | ".join(_pct(f["labels"][lab], n) for lab in LABELS)
        lat = (f"{f['p50_s']:.1f} / {f['p95_s']:.1f}" if f["p50_s"] is not None else "n/a")
        tps = f"{f['tokens_per_s']:.1f}" if f["tokens_per_s"] is not None else "n/a"
        tpj = f"{f['tokens_per_job']:.0f}" if f["tokens_per_job"] is not None else "n/a"
        body += (
            f"| `{mode}` | {f['jobs']} | {_pct(f['strict'], n)} | {_pct(f['hybrid'], n)} | "
            f"{_pct(f['ungrounded'], n)} | {_pct(f['collapsed'], n)} | {_pct(f['pointed'], n)} | "
            f"{_pct(f['truncated'], n)} | {labels} | {f['errors']} | {lat} | {tpj} | {tps} |\n"
        )
    started = min(r["started_at"] for r in rows if r.get("started_at"))
    finished = max(r["finished_at"] for r in rows if r.get("finished_at"))
    tail = (
        f"\n{len(rows)} jobs ({manifest.get('n_questions')} questions × "
        f"{len(manifest.get('modes') or MODES)} modes, n={manifest.get('n')}), model "
        f"`{manifest.get('model')}` on {manifest.get('llm_server')}, profile "
        f"`{manifest.get('model_profile_id')}`; wall time {(finished - started) / 60:.1f} min "
        f"(first job started to last job finished).\n"
    )
    return head + body + tail


def kinds_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """How many rows per mode carry each violation kind (markdown), errors left out."""
    ok = [r for r in rows if not r.get("error") and r.get("verdict")]
    modes = [m for m in MODES if any(r["mode"] == m for r in ok)]
    kinds = sorted({k for r in ok for k in r.get("violation_kinds") or []})
    out = "| violation kind | " + " | ".join(f"`{m}`" for m in modes) + " |\n"
    out += "|---|" + "---|" * len(modes) + "\n"
    for kind in kinds:
        cells = []
        for m in modes:
            mine = [r for r in ok if r["mode"] == m]
            cells.append(f"{sum(kind in (r.get('violation_kinds') or []) for r in mine)} / {len(mine)}")
        out += f"| {kind} | " + " | ".join(cells) + " |\n"
    return out


# What a row's answer text does, by surface (docs/llm.md, 'What a real model wrote').
HABITS: dict[str, Callable[[Mapping[str, Any]], bool]] = {
    "one line of text": lambda r: len([ln for ln in r["answer"].splitlines() if ln.strip()]) == 1,
    "a [E#] tag anywhere": lambda r: bool(re.search(r"\[\s*[Ee]\s*\d", r["answer"])),
    "an id outside brackets (E3, \"E1,\")": lambda r: bool(
        re.search(r"(?<!\[)\bE\d+\b", r["answer"])),
    "a { anywhere": lambda r: "{" in r["answer"],
    "a quoted span": lambda r: '"' in r["answer"] or "\u201c" in r["answer"],
    "starts \"The answer is\"": lambda r: r["answer"].casefold().startswith("the answer"),
    "the question written back": lambda r: r["question"].strip() in r["answer"],
    "HTML entities (&#x27;, &quot;)": lambda r: bool(re.search(r"&#x27;|&quot;|&amp;", r["answer"])),
    "prompt markup (<evidence ...>)": lambda r: "<evidence" in r["answer"],
    "cut at max_tokens": lambda r: r.get("finish_reason") == "length",
    "a sentence written twice or more": lambda r: max(Counter(
        s.strip() for s in re.split(r"(?<=[.!?])\s+|\n", r["answer"]) if len(s.strip()) > 20
    ).values(), default=0) >= 2,
}


def habits_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """How many answers per mode show each surface habit (markdown)."""
    kept = [r for r in rows if isinstance(r.get("answer"), str)]
    modes = [m for m in MODES if any(r["mode"] == m for r in kept)]
    out = "| what the answer does | " + " | ".join(f"`{m}`" for m in modes) + " |\n"
    out += "|---|" + "---|" * len(modes) + "\n"
    for name, test in HABITS.items():
        cells = []
        for m in modes:
            mine = [r for r in kept if r["mode"] == m]
            cells.append(f"{sum(test(r) for r in mine)} / {len(mine)}")
        out += f"| {name} | " + " | ".join(cells) + " |\n"
    return out


def _rereads(run_dir: Path, index_path: Path | None = None) -> Iterator[tuple[dict, Any]]:
    """Each row and its re-read by the current code (None for a row without an answer)."""
    from qfarm.worker.retrieval.embedded import EmbeddedRetriever

    manifest = read_manifest(run_dir)
    path = index_path or Settings().embedded_index_path()
    source = EmbeddedRetriever(path)
    for row in read_rows(run_dir):
        if row.get("answer") is None:
            yield row, None
        else:
            yield row, reread_row(row, manifest, source, str(path))


def reread_rows(run_dir: Path, index_path: Path | None = None) -> Iterator[tuple[dict, list[str]]]:
    """Each row with a kept answer and the differences the current code finds in it."""
    manifest = read_manifest(run_dir)
    for row, got in _rereads(run_dir, index_path):
        if got is None:
            continue
        if got.verification is None:
            yield row, [f"not re-verified: {' '.join(got.notes)}"]
            continue
        pre = run_preflight(str(row.get("question") or ""), Mode(str(row.get("mode"))),
                            manifest.policy, str(row.get("model_profile_id") or ""))
        now = (pre.quantifier.intensity.value, pre.quantifier.scope_bound_hint)
        was = (row.get("quantifier_intensity"), row.get("scope_bound_hint"))
        extra = [] if now == was else [f"quantifier: row {'/'.join(map(str, was))}, "
                                       f"recomputed {'/'.join(now)}"]
        yield row, [*got.differences, *extra]


def fixture_lines(run_dir: Path, wanted: Sequence[tuple[str, ...]]) -> Iterator[str]:
    """Rows as regression cases: question, mode, the blocks the model was shown, its answer
    and what the current code makes of them (``expected``, to be read and confirmed)."""
    from qfarm.common.grounding.preflight import run_preflight as preflight
    from qfarm.common.grounding.sidecar import assess_answerability
    from qfarm.common.grounding.verify import verify_answer
    from qfarm.worker.retrieval.embedded import EmbeddedRetriever

    manifest = read_manifest(run_dir)
    source = EmbeddedRetriever(Settings().embedded_index_path())
    rows = {(r.get("question_id"), r.get("mode")): r for r in read_rows(run_dir)}
    for qid, mode in wanted:
        row = rows[(qid, mode)]
        got = reread_row(row, manifest, source, "index")
        evidence = [{"id": e.id, "title": e.title, "text": e.text} for e in got.evidence]
        pre = preflight(row["question"], Mode(mode), manifest.policy, row["model_profile_id"])
        ver = verify_answer(row["answer"], question=row["question"], mode=Mode(mode),
                            evidence=got.evidence, policy=manifest.policy, preflight=pre)
        ans = assess_answerability(row["question"], row["answer"], got.evidence,
                                   manifest.policy, pre.quantifier)
        yield json.dumps({
            "source": f"{manifest.run_id} {qid} {mode}",
            "question": row["question"], "mode": mode, "evidence": evidence,
            "answer": row["answer"],
            "expected": {
                "verdict": ver.verdict.value, "label": ver.label.value,
                "violation_kinds": [k.value for k in ver.violation_kinds],
                "would_fire_kinds": [k.value for k in ver.would_fire_kinds],
                "n_claims": ver.n_claims, "n_verified": ver.n_verified,
                "quantifier_intensity": pre.quantifier.intensity.value,
                "scope_bound_hint": pre.quantifier.scope_bound_hint,
                "answerability_fired": ans is not None,
            },
        }, ensure_ascii=False)


def _show(row: Mapping[str, Any]) -> str:
    ans = row.get("answerability") or {}
    fired = f"sidecar {ans.get('answerability_confidence')}" if ans.get("answerability_fired") else ""
    return (
        f"=== [{row.get('question_id')}] {row.get('question')} | {row.get('mode')} | "
        f"{row.get('verdict')} {row.get('label')} {row.get('violation_kinds')} "
        f"{row.get('quantifier_intensity')}/{row.get('scope_bound_hint')} {fired} "
        f"n={row.get('n_verified')}/{row.get('n_claims')} {row.get('finish_reason')}\n"
        f"{row.get('answer')}\n"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.real_model", description=__doc__.split("\n")[0])
    p.add_argument("command", choices=("table", "reread", "show", "fixture", "habits", "kinds"))
    p.add_argument("run", type=Path, help="run directory (manifest.json, rows.jsonl)")
    p.add_argument("--mode", help="show: only this mode")
    p.add_argument("--question", help="show: only questions containing this text")
    p.add_argument("--reverified", action="store_true",
                   help="table: verify the kept answers again with the current code first")
    p.add_argument("--id", action="append", default=[],
                   help="fixture: QUESTION_ID:MODE of a row to write out (repeatable)")
    args = p.parse_args(argv)
    if not (args.run / "rows.jsonl").is_file():
        print(f"{args.run}: no rows.jsonl (give a run directory)", file=sys.stderr)
        return 2
    if args.command == "fixture":
        for line in fixture_lines(args.run, [tuple(i.split(":", 1)) for i in args.id]):
            print(line)
        return 0
    if args.command in ("habits", "kinds"):
        tables = {"habits": habits_table, "kinds": kinds_table}
        print(tables[args.command](read_rows(args.run)), end="")
        return 0
    if args.command == "table":
        print(figures_table(args.run, reverified=args.reverified), end="")
    elif args.command == "show":
        for row in read_rows(args.run):
            if args.mode and row.get("mode") != args.mode:
                continue
            if args.question and args.question.casefold() not in str(row.get("question")).casefold():
                continue
            print(_show(row))
    else:
        changed = 0
        for row, diffs in reread_rows(args.run):
            if diffs:
                changed += 1
                print(f"[{row.get('question_id')}] {row.get('mode')}: {row.get('question')}")
                for d in diffs:
                    print(f"    {d}")
        print(f"rows_read_differently={changed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
