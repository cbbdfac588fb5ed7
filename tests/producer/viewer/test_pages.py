"""Page handlers of the viewer, called directly (no server): content, links, escaping, index."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from bench.perf.viewer import synthetic_row, write_synthetic_run
from qfarm.common.models import ViolationKind
from qfarm.producer.reports import read_stats, write_summary
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
    assert f"quote: {100 * t.strict / t.valid:.1f}%" in html
    assert html.count("SIMULATED") == 2
    assert 'data-live="0"' in html


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
    assert progress() == {"run": "run-live", "rows": 0, "jobs": 12, "status": "running"}
    with rows_path.open("a") as fh:
        for k in range(5):
            fh.write(json.dumps(synthetic_row("run-live", k, 2)) + "\n")
        fh.write(json.dumps(synthetic_row("run-live", 5, 2))[:40])
        fh.flush()
        assert progress()["rows"] == 5
        fh.write(json.dumps(synthetic_row("run-live", 5, 2))[40:] + "\n")
    assert progress()["rows"] == 6
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
    assert "`quantifier_reminder_enabled` (on in run B): no signal" in html
    assert "FORMAT_COLLAPSED or NO_EVIDENCE_POINTER rate drops" in html


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
