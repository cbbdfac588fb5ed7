"""The row page claim by claim: passages read back by id, the verifier run again, spans marked."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from html.parser import HTMLParser
from pathlib import Path

import pytest

from qfarm.common.models import Evidence
from qfarm.producer.viewer.router import Viewer

PARIS_SPAN = "The Seine flows through Paris and into the English Channel"


class _Marks(HTMLParser):
    """Every <mark>'s classes and text, and the evidence block (``ev-E#``) it sits in."""

    def __init__(self) -> None:
        super().__init__()
        self.marks: list[tuple[str, str, str]] = []  # (block id, classes, text)
        self._block = ""
        self._depth = 0
        self._mark: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "div" and (a.get("id") or "").startswith("ev-"):
            self._block, self._depth = a["id"] or "", 1
        elif tag == "div" and self._block:
            self._depth += 1
        if tag == "mark":
            self._mark = [a.get("class") or "", ""]

    def handle_endtag(self, tag: str) -> None:
        if tag == "mark" and self._mark is not None:
            self.marks.append((self._block, self._mark[0], self._mark[1]))
            self._mark = None
        if tag == "div" and self._block:
            self._depth -= 1
            if not self._depth:
                self._block = ""

    def handle_data(self, data: str) -> None:
        if self._mark is not None:
            self._mark[1] += data


def marks(html: str) -> list[tuple[str, str, str]]:
    p = _Marks()
    p.feed(html)
    return p.marks


def rows_of(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "rows.jsonl").open()]


def position(rows: Sequence[dict], qid: str, mode: str) -> int:
    return next(i for i, r in enumerate(rows) if r["question_id"] == qid and r["mode"] == mode)


def page(viewer: Viewer, run_id: str, pos: int) -> str:
    resp = viewer.handle(f"/runs/{run_id}/rows/{pos}", {})
    assert resp.status == 200, resp.body[:300]
    return resp.body.decode()


@pytest.fixture
def run(real_run: Callable[..., Path], real_index: Path) -> tuple[Viewer, Path]:
    run_dir = real_run("run-real")
    return Viewer(run_dir.parent, index_path=real_index), run_dir


def test_rows_record_the_shown_passages_ids_in_rank_order(run: tuple[Viewer, Path]) -> None:
    _, run_dir = run
    for row in rows_of(run_dir):
        assert len(row["evidence_passage_ids"]) == len(row["evidence_ids"]) > 0
        assert all(re.fullmatch(r"\w+#\d+", p) for p in row["evidence_passage_ids"])


def rewritten(viewer: Viewer, run_dir: Path, rows: list[dict]) -> Viewer:
    """The run's rows.jsonl replaced by ``rows``, and a viewer that reads it afresh."""
    (run_dir / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return Viewer(run_dir.parent, index_path=viewer.index_path)


def test_pointer_row_shows_each_claim_and_marks_its_anchor_in_the_cited_passage(
    run: tuple[Viewer, Path],
) -> None:
    viewer, run_dir = run
    rows = rows_of(run_dir)
    pos = position(rows, "q1", "claim_lattice_pointer")
    row = rows[pos]
    assert (row["verdict"], row["violation_kinds"]) == ("HYBRID", ["CITATION_MISMATCH"])
    html = page(viewer, "run-real", pos)
    assert 'id="reproduced"' in html and "not-reproduced" not in html
    seine = "E" + str(row["evidence_passage_ids"].index("seine#0") + 1)
    assert (f"ev-{seine}", "hl", PARIS_SPAN) in marks(html)
    claims = re.search(r'<table class="claims">.*?</table>', html, re.S).group(0)
    assert claims.count("<tr>") == 3  # header + two claims
    assert "verified</span> (anchored)" in claims
    assert "not verified" in claims and "CITATION_MISMATCH" in claims
    assert "The Seine flows through Paris and into the English Channel" in claims  # matched span
    assert "The Seine is a river in northern France." in html  # the passage's text


@pytest.mark.parametrize(
    ("qid", "mode", "how", "span"),
    [
        ("q1", "quote", "exact", PARIS_SPAN),
        ("q1", "claim_lattice", "warrant", PARIS_SPAN),
        ("q3", "quote", "normalized", 'Their albums include "Abbey Road'),
        ("q2", "claim_lattice_pointer", "anchor", "was the first woman to win a Nobel Prize"),
    ],
)
def test_each_mode_marks_the_span_its_rule_matched(
    run: tuple[Viewer, Path], qid: str, mode: str, how: str, span: str
) -> None:
    viewer, run_dir = run
    html = page(viewer, "run-real", position(rows_of(run_dir), qid, mode))
    assert f'title="claim 1: {how} match"' in html
    assert '<div class="evidence cited" id="ev-E1">' in html  # cited, in every mode
    assert [(cls, text) for block, cls, text in marks(html) if block and cls == "hl"] == [
        ("hl", span)]
    assert 'id="reproduced"' in html


def test_sidecar_candidates_are_marked_in_the_evidence(run: tuple[Viewer, Path]) -> None:
    viewer, run_dir = run
    rows = rows_of(run_dir)
    pos = position(rows, "q3", "claim_lattice_pointer")
    assert rows[pos]["answerability"]["answerability_fired"] is True
    html = page(viewer, "run-real", pos)
    cands = [text for block, cls, text in marks(html) if block and cls == "cand"]
    assert cands == ["Abbey Road", "Revolver", "Let It Be"]
    assert "Answerability sidecar" in html and "the evidence does not say" in html
    assert 'id="reproduced"' in html


def test_a_row_the_recomputation_does_not_reproduce_says_so_and_keeps_its_figures(
    run: tuple[Viewer, Path],
) -> None:
    viewer, run_dir = run
    rows = rows_of(run_dir)
    pos = position(rows, "q2", "claim_lattice_pointer")
    rows[pos].update(verdict="UNGROUNDED", n_verified=0)  # as if another verifier had judged
    html = page(rewritten(viewer, run_dir, rows), "run-real", pos)
    assert 'id="not-reproduced"' in html and 'id="reproduced"' not in html
    assert "verdict: row UNGROUNDED, recomputed STRICT" in html
    assert "verified claims: row 0, recomputed 1" in html
    assert "UNGROUNDED · EVIDENCE-WARRANTED" in html  # the facts table shows the row's own


def test_a_row_without_its_cap_profile_is_not_verified_again_and_says_why(
    run: tuple[Viewer, Path],
) -> None:
    viewer, run_dir = run
    rows = rows_of(run_dir)
    pos = position(rows, "q2", "claim_lattice_pointer")
    del rows[pos]["model_profile_key"]
    html = page(rewritten(viewer, run_dir, rows), "run-real", pos)
    assert "no model_profile_key" in html and "nothing is re-verified" in html
    assert "reproduced" not in html


def test_without_a_kept_answer_the_passages_are_shown_and_nothing_is_verified(
    run: tuple[Viewer, Path],
) -> None:
    viewer, run_dir = run
    rows = rows_of(run_dir)
    for r in rows:
        r["answer"] = None
    html = page(rewritten(viewer, run_dir, rows), "run-real", 0)
    assert 'id="no-answer"' in html and "Answers were not kept" in html
    assert "The Seine flows through Paris" in html  # passage text from the index
    assert "claims" not in re.findall(r'<table class="(\w+)"', html)
    assert "reproduced" not in html
    assert "Preflight" in html and "Timings" in html


def test_an_index_that_lacks_the_passages_is_named_not_used(
    run: tuple[Viewer, Path], tmp_path: Path,
) -> None:
    _, run_dir = run
    html = page(Viewer(run_dir.parent, index_path=tmp_path / "absent.sqlite"), "run-real", 0)
    assert "No embedded index at" in html and "absent.sqlite" in html
    assert 'id="reproduced"' not in html and "<mark class=\"hl\" id=" not in html

    class Other:
        def passages(self, chunk_ids: Sequence[str]) -> dict[str, Evidence]:
            return {}

        def index_version(self) -> str:
            return "other"

    html = page(Viewer(run_dir.parent, passages=Other()), "run-real", 0)
    assert "lacks 3 of this row&#x27;s 3 passages" in html
    assert 'id="reproduced"' not in html


def test_passage_text_and_titles_are_escaped(run: tuple[Viewer, Path]) -> None:
    _, run_dir = run
    xss = "<script>alert(1)</script>"

    class Hostile:
        def passages(self, chunk_ids: Sequence[str]) -> dict[str, Evidence]:
            return {c: Evidence(id=c, doc_id="d", chunk_id=c, title=xss, text=f"{xss} The Seine "
                                "flows through Paris and into the English Channel.", score=0.0,
                                offset_start=0, offset_end=1) for c in chunk_ids}

        def index_version(self) -> str:
            return "hostile"

    html = page(Viewer(run_dir.parent, passages=Hostile()), "run-real", 0)
    assert xss not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "index version" in html  # the version drift is named


def test_a_claim_citing_nothing_is_not_called_a_mismatch_with_its_citation(
    real_run: Callable[..., Path], real_index: Path,
) -> None:
    """Its only pointer names an id outside the evidence map: dropped, the claim cites no
    block, and the page says that rather than "cites evidence that does not contain it"."""
    from qfarm.common.vocab import Mode

    run_dir = real_run("run-uncited", {("q2", Mode.CLAIM_LATTICE_POINTER):
                                       "Marie Curie was the first woman to win a Nobel Prize. [E99]"})
    viewer = Viewer(run_dir.parent, index_path=real_index)
    rows = rows_of(run_dir)
    pos = position(rows, "q2", "claim_lattice_pointer")
    assert "CITATION_MISMATCH" in rows[pos]["violation_kinds"]
    html = page(viewer, "run-uncited", pos)
    claims = re.search(r'<table class="claims">.*?</table>', html, re.S).group(0)
    assert "cites evidence that does not contain it" not in claims
    assert "the claim cites no evidence block" in claims
    kinds = re.search(r"<ul class=kinds>.*?</ul>", html, re.S).group(0)  # the row's list too
    assert "<b>CITATION_MISMATCH</b>: the claim cites no evidence block" in kinds
    assert "cache hit</td><td>no<" in page(viewer, "run-uncited", pos)
