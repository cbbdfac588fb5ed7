"""Page handlers of the viewer, called directly (no server): content, links, escaping, index."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from bench.perf.viewer import synthetic_row, write_synthetic_run
from qfarm.common.models import Manifest, ViolationKind
from qfarm.producer.reports.rows import read_stats
from qfarm.producer.reports.summary import write_summary
from qfarm.producer.viewer.html import MEANINGS
from qfarm.producer.viewer.pages.rows import PAGE_SIZE
from qfarm.producer.viewer.router import Viewer

XSS = "<script>alert(1)</script>"


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self.scripts: list[str] = []
        self._href: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "a":
            self._href = a.get("href") or ""
        if tag == "script":
            self.scripts.append(a.get("src") or "(inline)")

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self.links.append((data, self._href))
            self._href = None


def parse(body: bytes) -> _Links:
    p = _Links()
    p.feed(body.decode())
    return p


@pytest.fixture
def results(tmp_path: Path) -> Path:
    write_synthetic_run(tmp_path, "run-a", 20)
    write_synthetic_run(tmp_path, "run-b", 20)
    return tmp_path


def get(viewer: Viewer, path: str, **query: str) -> str:
    resp = viewer.handle(path, query)
    assert resp.status == 200, resp.body[:300]
    return resp.body.decode()


def test_runs_list_shows_every_run_with_strict_rates_and_badge(results: Path) -> None:
    html = get(Viewer(results), "/")
    for run_id in ("run-a", "run-b"):
        assert f'href="/runs/{run_id}"' in html
    stats = read_stats(results / "run-a" / "rows.jsonl")
    t = stats.modes["quote"].tally
    assert f"quote: {100 * t.strict / t.rows:.1f}% of {t.rows} jobs" in html
    assert "strict-rate per mode (of jobs; of answered)" in html
    # A mode with error rows shows its rate over the answered rows beside, named.
    cl = stats.modes["claim_lattice"].tally
    assert cl.errors and (f"claim_lattice: {100 * cl.strict / cl.rows:.1f}% of {cl.rows} jobs "
                          f"({100 * cl.strict / cl.valid:.1f}% of {cl.valid} answered)") in html
    assert html.count("SIMULATED") == 2
    assert 'data-live="0"' in html


def test_a_run_decoded_under_grammars_is_marked_so(results: Path) -> None:
    path = results / "run-b" / "manifest.json"
    manifest = Manifest.model_validate_json(path.read_text())
    policy = manifest.policy.model_copy(update={"structured_output": True})
    path.write_text(manifest.model_copy(update={"policy": policy}).model_dump_json())
    html = get(Viewer(results), "/")
    assert html.count(">GRAMMAR</span>") == 1
    assert ">GRAMMAR</span>" in get(Viewer(results), "/runs/run-b")
    assert ">GRAMMAR</span>" not in get(Viewer(results), "/runs/run-a")


def test_run_page_counts_link_to_exactly_those_rows(results: Path) -> None:
    viewer = Viewer(results)
    links = parse(viewer.handle("/runs/run-a", {}).body).links
    kind_links = [(t, u) for t, u in links if t.startswith("CITATION_MISMATCH ")]
    assert kind_links
    rows = [json.loads(line) for line in (results / "run-a" / "rows.jsonl").open()]
    for text, url in kind_links:
        mode = re.search(r"mode=(\w+)", url).group(1)
        expected = sum(1 for r in rows if r["mode"] == mode
                       and "CITATION_MISMATCH" in r["violation_kinds"])
        assert text == f"CITATION_MISMATCH {expected}"
        path, _, query = url.partition("?")
        html = get(viewer, path, **dict(p.split("=") for p in query.split("&")))
        assert f"<span id=matched>{expected}</span>" in html


def test_run_page_shows_plots_once_drawn(results: Path) -> None:
    viewer = Viewer(results)
    assert "No plots yet" in get(viewer, "/runs/run-a")
    write_summary(results / "run-a")
    html = get(viewer, "/runs/run-a")
    assert '<img src="/runs/run-a/files/strict_rate.png"' in html
    png = viewer.handle("/runs/run-a/files/strict_rate.png", {})
    assert png.content_type == "image/png" and png.body.startswith(b"\x89PNG")


def test_run_page_groups_errors_by_kind_and_links_to_those_rows(results: Path) -> None:
    """The error table has one line per ``error_kind`` (with one error's text), not one
    per error text, and its count opens exactly the rows of that kind."""
    viewer = Viewer(results)
    rows = [json.loads(line) for line in (results / "run-a" / "rows.jsonl").open()]
    expected = sum(1 for r in rows if r["error_kind"] == "llm")
    assert expected
    html = get(viewer, "/runs/run-a")
    assert "<th>error kind</th>" in html and "llm: endpoint timed out after 3 attempts" in html
    (url,) = [u for t, u in parse(html.encode()).links if "error_kind=llm" in u]
    assert url == "/runs/run-a/rows?error_kind=llm"
    page = get(viewer, "/runs/run-a/rows", error_kind="llm")
    assert f"<span id=matched>{expected}</span>" in page


def test_rows_filters_and_pages_match_a_plain_scan(results: Path) -> None:
    viewer = Viewer(results)
    rows = [json.loads(line) for line in (results / "run-a" / "rows.jsonl").open()]
    cases = {
        ("verdict", "UNGROUNDED"): lambda r: r["verdict"] == "UNGROUNDED",
        ("verdict", "none"): lambda r: r["verdict"] is None,
        ("label", "POINTER-LINKED"): lambda r: r["label"] == "POINTER-LINKED",
        ("intensity", "PLURAL"): lambda r: r["quantifier_intensity"] == "PLURAL",
        ("endpoint", "http://127.0.0.1:8001"): lambda r: r["endpoint"].endswith(":8001"),
        ("error", "any"): lambda r: bool(r["error"]),
        ("error", "TIMED OUT"): lambda r: "timed out" in (r["error"] or ""),
        ("q", "number 7?"): lambda r: "number 7?" in r["question"],
    }
    for (key, value), want in cases.items():
        html = get(viewer, "/runs/run-a/rows", **{key: value})
        assert f"<span id=matched>{sum(map(want, rows))}</span>" in html, (key, value)
    last = -(-len(rows) // PAGE_SIZE)
    html = get(viewer, "/runs/run-a/rows", page=str(last))
    shown = re.findall(r'href="/runs/run-a/rows/(\d+)"', html)
    assert [int(s) for s in shown] == list(range((last - 1) * PAGE_SIZE, len(rows)))


def test_row_page_highlights_cited_evidence_and_explains_kinds(results: Path) -> None:
    viewer = Viewer(results)
    row = synthetic_row("run-a", 3, 2)  # cites E4 and E5, carries a violation kind
    html = get(viewer, "/runs/run-a/rows/3")
    assert row["violation_kinds"]
    assert re.search(r'class="evidence cited" id="ev-E4"', html)
    assert re.search(r'class="evidence cited" id="ev-E5"', html)
    assert 'class="evidence" id="ev-E1"' in html
    assert '<a class="cite" href="#ev-E4"><mark>[E4]</mark></a>' in html
    kind = row["violation_kinds"][0]
    assert MEANINGS[ViolationKind(kind)] in html
    assert "queue wait" in html and "class=\"wb\"" in html


def test_every_violation_kind_has_a_meaning() -> None:
    assert set(MEANINGS) == set(ViolationKind)


def test_row_page_says_when_answers_were_not_kept(results: Path) -> None:
    rows_path = results / "run-a" / "rows.jsonl"
    lines = rows_path.read_text().splitlines()
    row = json.loads(lines[0])
    row["answer"] = None
    lines[0] = json.dumps(row)
    rows_path.write_text("\n".join(lines) + "\n")
    html = get(Viewer(results), "/runs/run-a/rows/0")
    assert "Answers were not kept" in html
    assert "Preflight" in html and "ev-E1" in html


def test_model_output_is_escaped_everywhere(tmp_path: Path) -> None:
    run_dir = write_synthetic_run(tmp_path, "run-x", 2)
    rows_path = run_dir / "rows.jsonl"
    rows = [json.loads(line) for line in rows_path.open()]
    for r in rows:
        r.update(question=XSS, answer=f"{XSS} [E1]", error=XSS if r["error"] else None,
                 endpoint=XSS, violation_kinds=[XSS], label=XSS, quantifier_intensity=XSS,
                 top_doc_titles=[XSS])
    rows_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    viewer = Viewer(tmp_path)
    heatmap = svgs(get(viewer, "/runs/run-x"))
    assert XSS in "".join(heatmap.titles["question-heatmap"])  # escaped text, read back as text
    assert XSS in "".join(heatmap.titles["kinds-plot"])
    assert not [tag for els in heatmap.svgs.values() for tag, _ in els if tag == "script"]
    for path, query in (("/", {}), ("/runs/run-x", {}), ("/runs/run-x/rows", {"q": XSS}),
                        ("/runs/run-x/rows/0", {}), ("/compare", {"a": "run-x", "b": "run-x"})):
        body = viewer.handle(path, query).body
        assert b"<script>alert" not in body, path
        assert parse(body).scripts == ["/static/viewer.js"], path


def test_index_follows_a_growing_file_and_a_half_written_line(tmp_path: Path) -> None:
    run_dir = write_synthetic_run(tmp_path, "run-live", 2, status="running")
    rows_path = run_dir / "rows.jsonl"
    rows_path.write_text("")
    viewer = Viewer(tmp_path)
    progress = lambda: json.loads(viewer.handle("/api/progress", {"run": "run-live"}).body)  # noqa: E731
    assert progress() == {"run": "run-live", "rows": 0, "jobs": 12, "status": "running", "status_text": "running"}
    with rows_path.open("a") as fh:
        for k in range(5):
            fh.write(json.dumps(synthetic_row("run-live", k, 2)) + "\n")
        fh.write(json.dumps(synthetic_row("run-live", 5, 2))[:40])
        fh.flush()
        assert progress()["rows"] == 5
        fh.write(json.dumps(synthetic_row("run-live", 5, 2))[40:] + "\n")
    assert progress()["rows"] == 6
    assert progress()["status_text"] == "running (1 error row so far)"  # job 5 errored
    assert "job00000005" in get(viewer, "/runs/run-live/rows/5")
    assert 'data-live="1"' in get(viewer, "/")
    rows_path.write_text(json.dumps(synthetic_row("run-live", 9, 2)) + "\n")  # replaced
    assert progress()["rows"] == 1


def test_compare_page_lists_deltas_and_changed_verdicts_linked_to_both_rows(
    results: Path,
) -> None:
    rows_path = results / "run-b" / "rows.jsonl"
    rows = [json.loads(line) for line in rows_path.open()]
    flipped = [k for k, r in enumerate(rows) if r["verdict"] == "UNGROUNDED"][:7]
    for k in flipped:
        rows[k]["verdict"] = "STRICT"
    rows_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    html = get(Viewer(results), "/compare", a="run-a", b="run-b", floor="5")
    assert "strict-rate" in html and "Δ points" in html
    assert f"Verdicts that changed ({len(flipped)})" in html
    for k in flipped:
        assert f'<a href="/runs/run-a/rows/{k}">UNGROUNDED</a>' in html
        assert f'<a href="/runs/run-b/rows/{k}">STRICT</a>' in html


def test_compare_page_states_the_phase_decision_and_what_decided_it(results: Path) -> None:
    path = results / "run-b" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["policy"]["quantifier_reminder_enabled"] = True
    path.write_text(json.dumps(manifest))
    html = get(Viewer(results), "/compare", a="run-a", b="run-b", floor="5")
    assert "<h2>Quantifier phase decision</h2>" in html
    assert "<code>quantifier_reminder_enabled</code> (on in run B): <b>no signal</b>" in html
    assert "FORMAT_COLLAPSED or NO_EVIDENCE_POINTER rate drops" in html
    # The policy's values as the policy spells them, never Python's False/True.
    assert "<code>quantifier_reminder_enabled</code>: false → true" in html
    assert "False" not in html and "True" not in html


def text_of(html: str) -> str:
    """What a reader sees of a page: its text outside tags, scripts and styles."""
    class _Text(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.parts: list[str] = []
            self._skip = 0

        def handle_starttag(self, tag: str, attrs: list) -> None:
            self._skip += tag in ("script", "style")

        def handle_endtag(self, tag: str) -> None:
            self._skip -= tag in ("script", "style")

        def handle_data(self, data: str) -> None:
            if not self._skip:
                self.parts.append(data)

    p = _Text()
    p.feed(html)
    return "".join(p.parts)


def test_summary_markup_never_shows_as_backticks_or_asterisks(results: Path) -> None:
    """Warnings, notes and decisions come from the summary's markdown: their code spans are
    <code> on the page, not literal backticks."""
    path = results / "run-b" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["policy"]["quantifier_reminder_enabled"] = True
    manifest["model"] = "other-model"  # a warning naming both models in code spans
    path.write_text(json.dumps(manifest))
    rows_path = results / "run-a" / "rows.jsonl"
    lines = rows_path.read_text().splitlines()
    rows_path.write_text("\n".join([*lines, lines[0]]) + "\n")  # a duplicate: a warning
    viewer = Viewer(results)
    run_page = get(viewer, "/runs/run-a")
    assert "<code>qfarm verify</code>" in run_page
    compare = get(viewer, "/compare", a="run-a", b="run-b", floor="5")
    assert "<code>other-model</code>" in compare
    for html in (run_page, compare):
        assert "`" not in text_of(html) and "**" not in text_of(html)


@pytest.mark.parametrize("path,query,status", [
    ("/runs/nope", {}, 404),
    ("/runs/..", {}, 404),
    ("/runs/run-a/rows/100000", {}, 404),
    ("/runs/run-a/files/manifest.json", {}, 404),
    ("/static/../pages.py", {}, 404),
    ("/compare", {"a": "run-a", "b": "run-b", "floor": "-1"}, 400),
    ("/compare", {"a": "run-a", "b": "run-b", "floor": "x"}, 400),
])
def test_bad_requests_are_clear_errors(results: Path, path: str, query: dict, status: int) -> None:
    assert Viewer(results).handle(path, query).status == status


def test_row_page_shows_the_dry_run_kinds_and_a_trimmed_pointer_linked_label(results: Path) -> None:
    rows_path = results / "run-a" / "rows.jsonl"
    rows = [json.loads(line) for line in rows_path.open()]
    rows[0].update(
        verdict="HYBRID",
        label="POINTER-LINKED",
        violation_kinds=["BROAD_QUANTIFIER_CAP_APPLIED", "TOO_MANY_CLAIMS"],
        would_fire_kinds=[],
    )
    rows[1].update(would_fire_kinds=["BROAD_QUANTIFIER_SCOPE_UNBOUND"])
    rows_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    viewer = Viewer(results)
    assert "HYBRID · BROAD-CAPPED · POINTER-LINKED" in get(viewer, "/runs/run-a/rows/0")
    assert "BROAD_QUANTIFIER_SCOPE_UNBOUND" in get(viewer, "/runs/run-a/rows/1")


def test_control_characters_never_reach_a_page(tmp_path: Path) -> None:
    run_dir = write_synthetic_run(tmp_path, "run-nul", 2)
    rows_path = run_dir / "rows.jsonl"
    rows = [json.loads(line) for line in rows_path.open()]
    for r in rows:
        r.update(question="nul\x00here\x07?", answer="an\x00swer [E1]")
    rows_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    viewer = Viewer(tmp_path)
    for path in ("/runs/run-nul", "/runs/run-nul/rows", "/runs/run-nul/rows/0"):
        body = viewer.handle(path, {}).body
        assert b"\x00" not in body and b"\x07" not in body, path
        if path != "/runs/run-nul":  # the run page names no question
            assert "nul\ufffdhere\ufffd?".encode() in body, path


def test_a_run_without_rows_yet_renders_on_every_page(tmp_path: Path) -> None:
    """After ``--detach``, and for a moment after an API sweep, a run directory has its
    manifest but no rows.jsonl; one that has begun may have rows of one mode only."""
    empty = write_synthetic_run(tmp_path, "run-empty", 2, status="running")
    (empty / "rows.jsonl").unlink()
    begun = write_synthetic_run(tmp_path, "run-begun", 2, status="running")
    rows = [json.loads(line) for line in (begun / "rows.jsonl").open()]
    (begun / "rows.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows if r["mode"] == "quote"))
    viewer = Viewer(tmp_path)
    html = get(viewer, "/")
    assert 'href="/runs/run-empty"' in html and '<progress max="12" value="0">' in html
    assert "quote: " in html and "claim_lattice: " not in html
    for run_id in ("run-empty", "run-begun"):
        get(viewer, f"/runs/{run_id}")
        get(viewer, f"/runs/{run_id}/rows")
        get(viewer, "/compare", a=run_id, b="run-begun")
    assert "<span id=matched>0</span>" in get(viewer, "/runs/run-empty/rows")
    for fmt in ("csv", "jsonl"):  # an export of no rows: a CSV header, an empty JSONL
        resp = viewer.handle(f"/runs/run-empty/rows.{fmt}", {})
        assert resp.status == 200 and len(b"".join(resp.stream or ()).splitlines()) == (
            fmt == "csv")


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "rows.jsonl").open()]


def _with_gold(results: Path) -> list[dict]:
    """run-a's rows, a third of them with a gold answer matched and a third missed."""
    rows = _rows(results / "run-a")
    for k, r in enumerate(rows):
        r["gold_in_claims"] = {0: None, 1: True, 2: False}[k % 3]
        r["usage"] = {"prompt_tokens": 700 + k, "completion_tokens": 40 + k % 7}
        r["llm_request"] = {"sent_at": 1_700_000_000.0 + k, "ms": 60.0, "prompts": 1}
    rows[4]["answer"] = "The Danube passes through VIENNA. [E1]"
    (results / "run-a" / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def _positions(html: str, run_id: str = "run-a") -> list[int]:
    return [int(s) for s in re.findall(rf'<td><a href="/runs/{run_id}/rows/(\d+)">', html)]


def test_rows_table_shows_latency_tokens_and_gold_and_filters_on_them(results: Path) -> None:
    rows = _with_gold(results)
    viewer = Viewer(results)
    html = get(viewer, "/runs/run-a/rows")
    for word in ("latency ms", "tokens", "gold"):
        assert f">{word}</a></th>" in html
    first = re.search(r"<tr><td><a href=\"/runs/run-a/rows/1\">.*?</tr>", html).group(0)
    assert f">{700 + 1 + 40 + 1}</span>" in first and ">match</span>" in first
    assert f"<td>{rows[1]['timings']['total_ms']:.0f}" in first or \
        f"<td>{rows[1]['timings']['total_ms']:.1f}" in first
    cases = {
        ("gold", "match"): lambda r: r["gold_in_claims"] is True,
        ("gold", "miss"): lambda r: r["gold_in_claims"] is False,
        ("gold", "none"): lambda r: r["gold_in_claims"] is None,
        ("failures", "1"): lambda r: bool(r["error"]) or r["verdict"] in (None, "UNGROUNDED")
        or r["gold_in_claims"] is False,
        # the search reads answers as well as questions, in any case
        ("q", "vienna"): lambda r: "vienna" in r["question"].lower()
        or "vienna" in (r["answer"] or "").lower(),
    }
    for (key, value), want in cases.items():
        html = get(viewer, "/runs/run-a/rows", **{key: value})
        assert f"<span id=matched>{sum(map(want, rows))}</span>" in html, (key, value)
    assert _positions(get(viewer, "/runs/run-a/rows", q="vienna")) == [4]


@pytest.mark.parametrize("sort,key", [
    ("latency", lambda r: r["timings"]["total_ms"]),
    ("tokens", lambda r: r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"]),
    ("question_id", lambda r: r["question_id"]),
    ("verdict", lambda r: r["verdict"]),
])
def test_rows_sort_by_a_column_both_ways_across_pages(results: Path, sort: str, key) -> None:
    rows = _with_gold(results)
    viewer = Viewer(results)
    have = [k for k, r in enumerate(rows) if key(r) is not None]
    none = [k for k, r in enumerate(rows) if key(r) is None]  # last, either way
    for desc in ("", "1"):
        want = sorted(have, key=lambda k: key(rows[k]), reverse=bool(desc)) + none
        got: list[int] = []
        for page in range(1, -(-len(rows) // PAGE_SIZE) + 1):
            got += _positions(get(viewer, "/runs/run-a/rows", sort=sort, desc=desc,
                                  page=str(page)))
        assert [key(rows[k]) for k in got] == [key(rows[k]) for k in want], (sort, desc)
    html = get(viewer, "/runs/run-a/rows", sort=sort, verdict="STRICT")
    # the header sorts the other way, keeping the filter; the form keeps the sort
    assert f'href="/runs/run-a/rows?verdict=STRICT&amp;sort={sort}&amp;desc=1"' in html
    assert f'<input type="hidden" name="sort" value="{sort}">' in html


def test_export_streams_the_filtered_sorted_rows_as_csv_and_jsonl(results: Path) -> None:
    import csv
    import io

    rows = _with_gold(results)
    rows[2]["question"] = "=HYPERLINK(\"http://x\")"
    (results / "run-a" / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    viewer = Viewer(results)
    query = {"failures": "1", "mode": "quote", "sort": "latency", "desc": "1"}
    page = get(viewer, "/runs/run-a/rows", **query)
    href = re.search(r'id="export-csv" href="([^"]+)"', page).group(1).replace("&amp;", "&")
    assert href.startswith("/runs/run-a/rows.csv?") and "failures=1" in href
    want = _positions(page)  # one page holds them all here
    resp = viewer.handle("/runs/run-a/rows.jsonl", query)
    assert resp.status == 200 and resp.stream is not None and resp.body == b""
    assert "attachment" in resp.headers["Content-Disposition"]
    lines = b"".join(resp.stream).decode().splitlines()
    assert [json.loads(x) for x in lines] == [rows[k] for k in want]
    resp = viewer.handle("/runs/run-a/rows.csv", query)
    assert resp.content_type.startswith("text/csv") and resp.stream is not None
    table = list(csv.DictReader(io.StringIO(b"".join(resp.stream).decode())))
    assert [int(t["position"]) for t in table] == want
    assert [t["job_id"] for t in table] == [rows[k]["job_id"] for k in want]
    assert table[0]["total_ms"] == str(rows[want[0]]["timings"]["total_ms"])
    everything = list(csv.DictReader(io.StringIO(b"".join(
        viewer.handle("/runs/run-a/rows.csv", {}).stream or []).decode())))
    assert len(everything) == len(rows)
    assert everything[2]["question"].startswith("'=HYPERLINK")  # no formula for a spreadsheet


def test_row_page_shows_gold_answers_the_match_and_token_usage(results: Path) -> None:
    from qfarm.common.questions import digest_content

    rows = _with_gold(results)
    qfile = results / "gold.jsonl"
    qfile.write_bytes("".join(json.dumps({"id": f"q{q:06d}", "question": f"Q{q}?",
                                          "answers": ["Seine", f"<b>river {q}</b>"]}) + "\n"
                              for q in range(20)).encode())
    path = results / "run-a" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest.update(question_file=str(qfile), question_file_digest=digest_content(qfile.read_bytes()))
    path.write_text(json.dumps(manifest))
    viewer = Viewer(results)
    html = get(viewer, "/runs/run-a/rows/1")  # gold matched
    assert '<ul class=gold><li>Seine</li><li>&lt;b&gt;river 0&lt;/b&gt;</li></ul>' in html
    assert 'id="gold-match">the answer matched a gold answer<' in html
    tokens = rows[1]["usage"]
    total = tokens["prompt_tokens"] + tokens["completion_tokens"]
    assert (f"<td>{total} ({tokens['prompt_tokens']} prompt + {tokens['completion_tokens']} "
            "completion)</td>") in html
    assert 'id="gold-match">the answer matched no gold answer<' in get(viewer, "/runs/run-a/rows/2")
    qfile.write_text(qfile.read_text() + '{"id": "extra", "question": "Q?"}\n')  # edited since
    html = get(viewer, "/runs/run-a/rows/1")
    assert "has changed since the run" in html and "class=gold" not in html
    assert 'id="gold-match">the answer matched a gold answer<' in html  # the row's flag stands
    qfile.unlink()
    assert "is not on this host" in get(viewer, "/runs/run-a/rows/1")


def test_compare_picker_proposes_the_two_latest_sweeps_over_one_question_file(
    tmp_path: Path,
) -> None:
    for run_id, created, qfile in (("run-1", 1, "a.txt"), ("run-2", 2, "b.txt"),
                                   ("run-3", 3, "a.txt"), ("run-4", 4, "c.txt"),
                                   ("run-5", 5, "a.txt")):
        run_dir = write_synthetic_run(tmp_path, run_id, 1)
        path = run_dir / "manifest.json"
        manifest = json.loads(path.read_text())
        manifest.update(created_at=1_700_000_000.0 + created, question_file=f"sets/{qfile}",
                        question_file_digest=f"sha256:{qfile}")
        path.write_text(json.dumps(manifest))
    html = get(Viewer(tmp_path), "/compare")
    assert '<option value="run-3" selected>' in html.split('name="b"')[0]  # a: the older
    assert '<option value="run-5" selected>' in html.split('name="b"')[1]
    assert "same question file (a.txt)" in html


class _Svg(HTMLParser):
    """Every element inside each inline <svg>, by the svg's id: (tag, attributes), and the
    text of each <title>."""

    def __init__(self) -> None:
        super().__init__()
        self.svgs: dict[str, list[tuple[str, dict[str, str | None]]]] = {}
        self.titles: dict[str, list[str]] = {}
        self._svg: str | None = None
        self._title: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "svg":
            self._svg = a.get("id") or ""
            self.svgs[self._svg], self.titles[self._svg] = [(tag, a)], []
        elif self._svg is not None:
            self.svgs[self._svg].append((tag, a))
            if tag == "title":
                self._title = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self._svg = None
        if tag == "title" and self._title is not None and self._svg is not None:
            self.titles[self._svg].append("".join(self._title))
            self._title = None

    def handle_data(self, data: str) -> None:
        if self._title is not None:
            self._title.append(data)


def svgs(html: str) -> _Svg:
    p = _Svg()
    p.feed(html)
    return p


def set_policy(results: Path, run_id: str, **fields: object) -> None:
    path = results / run_id / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["policy"].update(fields)
    path.write_text(json.dumps(manifest))


def test_policy_overrides_tell_a_caps_run_from_a_reminder_run(results: Path) -> None:
    set_policy(results, "run-a", quantifier_guard_apply_caps=True)
    set_policy(results, "run-b", quantifier_reminder_enabled=True)
    viewer = Viewer(results)
    listed = get(viewer, "/")
    line = {r: re.search(rf'<tr><td><a href="/runs/{r}">.*?</tr>', listed).group(0)
            for r in ("run-a", "run-b")}
    assert "<th>policy overrides</th>" in listed
    assert "quantifier_guard_apply_caps=true" in line["run-a"]
    assert "quantifier_reminder_enabled" not in line["run-a"]
    assert "quantifier_reminder_enabled=true" in line["run-b"]
    assert "quantifier_guard_apply_caps" not in line["run-b"]
    assert re.search(r"<td>policy overrides</td><td><code[^>]*>quantifier_reminder_enabled=true"
                     "</code>", get(viewer, "/runs/run-b"))
    write_synthetic_run(results, "run-c", 2)
    assert "none (defaults)" in get(viewer, "/runs/run-c")


def test_run_page_has_the_summarys_per_question_and_dry_run_tables(results: Path) -> None:
    rows_path = results / "run-a" / "rows.jsonl"
    rows = [json.loads(line) for line in rows_path.open()]
    for r in rows[:5]:
        r["would_fire_kinds"] = ["BROAD_QUANTIFIER_SCOPE_UNBOUND"]
    rows_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    viewer = Viewer(results)
    html = get(viewer, "/runs/run-a")
    stats = read_stats(rows_path)
    dry = re.search(r'<table class="dry-run">.*?</table>', html, re.S).group(0)
    for mode, ms in stats.modes.items():
        n = ms.would_fire["BROAD_QUANTIFIER_SCOPE_UNBOUND"]
        assert re.search(rf"<td>{mode}</td><td>(yes|no)</td><td>{n} \(", dry), mode
    assert sum(ms.would_fire["BROAD_QUANTIFIER_SCOPE_UNBOUND"] for ms in stats.modes.values()) == 5
    questions = re.search(r'<table class="questions">.*?</table>', html, re.S).group(0)
    assert questions.count("<tr>") == len(stats.questions) + 1
    for qid, q in stats.questions.items():
        cells = "".join(
            f'<td><a href="/runs/run-a/rows?qid={qid}&amp;mode={m}">'
            f"{c.strict}/{c.hybrid}/{c.ungrounded}/{c.errors}</a></td>"
            for m, c in ((m, q.cells[m]) for m in ("quote", "claim_lattice_pointer",
                                                   "claim_lattice")))
        assert f"<td>{qid}</td>{cells}" in questions
    # A cell (in the table and in the heatmap) opens exactly that question's rows in that mode.
    qid, q = next(iter(stats.questions.items()))
    url = f"/runs/run-a/rows?qid={qid}&amp;mode=quote"
    assert f'<a href="{url}"><g class="cell"' in html
    page = get(viewer, "/runs/run-a/rows", qid=qid, mode="quote")
    assert f"<span id=matched>{q.cells['quote'].rows}</span>" in page
    assert f'name="qid" value="{qid}"' in page  # the filter form keeps it
    picked = [json.loads(line) for line in rows_path.open()]
    assert re.findall(r'<a href="/runs/run-a/rows/(\d+)">', page) == [
        str(i) for i, r in enumerate(picked) if r["question_id"] == qid and r["mode"] == "quote"]
    set_policy(results, "run-b", quantifier_guard_apply_caps=True)  # caps on: no dry run
    assert "Quantifier guard dry run" not in get(viewer, "/runs/run-b")


def test_run_page_draws_verdicts_kinds_and_questions_as_svg_with_their_numbers(
    results: Path,
) -> None:
    html = get(Viewer(results), "/runs/run-a")
    stats = read_stats(results / "run-a" / "rows.jsonl")
    found = svgs(html)
    assert {"verdict-plot", "kinds-plot", "question-heatmap"} <= set(found.svgs)
    for key, elements in found.svgs.items():
        root = elements[0][1]
        assert root["role"] == "img" and root["aria-labelledby"] == f"{key}-t {key}-d"
        assert found.titles[key][0]  # the plot's own title, then one per mark
    segs = [a for tag, a in found.svgs["verdict-plot"] if a.get("class") == "seg"]
    for mode, ms in stats.modes.items():
        t = ms.tally
        want = {"STRICT": t.strict, "HYBRID": t.hybrid, "UNGROUNDED": t.ungrounded,
                "error": t.errors}
        tips = [x for x in found.titles["verdict-plot"] if x.startswith(f"{mode}: ")]
        got = {x.split(": ")[1].split()[0]: int(x.split()[2]) for x in tips}
        assert got == {k: v for k, v in want.items() if v}, mode
        assert all(f"of {t.rows} rows" in x for x in tips)
    assert sum(int(a["data-count"]) for a in segs) == stats.rows
    bars = [a for tag, a in found.svgs["kinds-plot"] if a.get("class") == "bar"]
    assert len(bars) == len(stats.kinds_seen) * len(stats.modes)
    assert sum(int(a["data-count"]) for a in bars) == sum(
        sum(ms.kinds.values()) for ms in stats.modes.values())
    cells = [a for tag, a in found.svgs["question-heatmap"] if a.get("class") == "cell"]
    assert len(cells) == len(stats.questions) * len(stats.modes)


def test_compare_page_draws_each_delta_with_its_interval_against_the_floor(
    results: Path,
) -> None:
    from qfarm.producer.reports.compare import compare_dirs

    rows_path = results / "run-b" / "rows.jsonl"
    rows = [json.loads(line) for line in rows_path.open()]
    for r in rows:
        if r["verdict"] == "UNGROUNDED" and r["mode"] == "quote":
            r["verdict"] = "STRICT"
    rows_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    html = get(Viewer(results), "/compare", a="run-a", b="run-b", floor="5")
    found = svgs(html)
    assert found.svgs["forest-plot"][0][1]["role"] == "img"
    cmp = compare_dirs(results / "run-a", results / "run-b", 5.0)
    drawn = [d for d in cmp.deltas if d.delta is not None and d.low is not None]
    tips = [t for t in found.titles["forest-plot"] if "95% interval [" in t]
    assert len(tips) == len(drawn) > 0
    for d, tip in zip(drawn, tips, strict=True):
        assert tip.startswith(f"{d.mode} · {d.metric.label}: Δ {d.delta:+.1f} points")
        assert f"[{d.low:+.1f}, {d.high:+.1f}]" in tip
        assert tip.endswith(f"signal, {d.effect}" if d.verdict == "signal" else "noise")
    effects = [a["data-effect"] for tag, a in found.svgs["forest-plot"]
               if a.get("class") == "fp-row"]
    assert "better" in effects  # the flipped verdicts clear the floor somewhere
    floor = [a for tag, a in found.svgs["forest-plot"] if a.get("class") == "floor"]
    assert len(floor) == 1
