"""``python -m bench.perf.scale``: the growth exponent, the tables, and a quick run of both
halves at small sizes (the 10k, 100k and 1M points are the benchmark's, not CI's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.perf.scale import growth_exponent, main, max_exponent, table
from bench.perf.scale_passages import enlarged_corpus, perturbed


def test_growth_exponent_is_the_log_log_slope() -> None:
    assert growth_exponent([10, 100, 1000], [2.0, 20.0, 200.0]) == pytest.approx(1.0)
    assert growth_exponent([10, 100], [5.0, 5.0]) == pytest.approx(0.0)
    assert growth_exponent([10, 100], [1.0, 100.0]) == pytest.approx(2.0)
    assert growth_exponent([10, 100], [1.0, None]) is None


def test_the_table_flags_a_figure_that_grows_faster_than_linear() -> None:
    points = {1000: {"a": 1.0, "b": 10.0}, 10_000: {"a": 10.0, "b": 1000.0}}
    text = table("t", points, {"a": "s", "b": "s"}, {"a": "grows", "b": "grows"})
    assert "| a (s) | 1.00 | 10.00 | 1.00 |" in text
    assert "| b (s) | 10.00 | 1,000 | 2.00 **>1.05** |" in text
    assert max_exponent(points, {"a": "grows", "b": "flat"}) == pytest.approx(1.0)


def test_copies_are_deterministic_perturbations_of_the_articles() -> None:
    base = {"Seine": {"title": "Seine", "extract": "The Seine is a river in France."},
            "Danube": {"title": "Danube", "extract": "The Danube flows to the Black Sea."}}
    docs = list(enlarged_corpus(base, 6))
    assert [d["id"] for d in docs] == ["Seine", "Danube", "Seine#1", "Danube#1", "Seine#2",
                                       "Danube#2"]
    assert docs[0]["text"] == "The Seine is a river in France."
    assert docs == list(enlarged_corpus(base, 6))
    title, text = perturbed("Seine", "The Seine is a river in France.", 1, ["x"], ["y"])
    assert len(text.split()) == 7 and len(title.split()) == 2


@pytest.mark.slow
def test_a_quick_run_prints_both_tables_and_writes_both_plots(
    tmp_path: Path, default_index: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("QFARM_DATA_DIR", str(default_index.parents[1]))
    out = tmp_path / "out"
    code = main(["--quick", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    assert "### Jobs (SIMULATED LLM, zero latency)" in printed
    assert "### Passages (embedded index)" in printed
    assert "| eager: wall (s) |" in printed and "| query p50 (ms) |" in printed
    assert printed.rstrip().splitlines()[-1].startswith("scale_max_exponent=")
    assert (out / "scale_jobs.png").stat().st_size > 0
    assert (out / "scale_passages.png").stat().st_size > 0
    assert "![jobs](scale_jobs.png)" in (out / "scale.md").read_text()


def test_originals_search_ranks_the_articles_as_if_their_copies_took_no_place(
    tmp_path: Path,
) -> None:
    from bench.perf.scale_passages import originals_search
    from qfarm.worker.retrieval.embedded import EmbeddedRetriever
    from qfarm.worker.retrieval.ingest import CorpusSource, build_embedded_index

    base = {f"River {i}": {"title": f"River {i}",
                           "extract": f"River {i} flows through the {w} valley to the sea."}
            for i, w in enumerate(["green", "quiet", "northern", "long", "old", "wide"])}
    base["Lake"] = {"title": "Lake", "extract": "The lake lies in the green valley."}
    originals = {v["title"] for v in base.values()}
    question = "Which river flows through the green valley?"

    def index_of(documents: int) -> EmbeddedRetriever:
        corpus = tmp_path / f"c{documents}.jsonl"
        corpus.write_text("".join(json.dumps(d) + "\n" for d in enlarged_corpus(base, documents)))
        build_embedded_index(CorpusSource.resolve(str(corpus)), tmp_path / f"i{documents}.sqlite",
                             progress=False, force=True)
        return EmbeddedRetriever(tmp_path / f"i{documents}.sqlite")

    alone = index_of(len(base))
    plain = alone.search(question, top_k=3, title_boost=2.0)
    assert originals_search(alone, question, originals, top_k=3, title_boost=2.0) == plain
    enlarged = index_of(len(base) * 40)
    crowded = enlarged.search(question, top_k=3, title_boost=2.0)
    kept = originals_search(enlarged, question, originals, top_k=3, title_boost=2.0)
    assert any(e.doc_id not in originals for e in crowded)  # copies take places...
    assert [e.doc_id for e in kept] and all(e.doc_id in originals for e in kept)  # ...not here
